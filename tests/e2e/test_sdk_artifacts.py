"""Artifacts through the SDK and a real daemon, on both teammate transports and both
flavours: `Claim.put_artifact` from bytes, text and a file streamed in pieces,
`Task.artifacts`, `get_artifact` into memory or atomically into a file, a dependent's
`Claim.dependency_artifacts`, Watch's `ArtifactAdded`, and each refusal as its typed
exception with nothing attached."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

import corral
import corral.aio
from tests.support import FAST_POLL, TeammateThread, task_reached, watch_until

pytestmark = [pytest.mark.usefixtures("transport"), pytest.mark.timeout(90)]

MiB = 1024 * 1024


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@contextlib.contextmanager
def _held_claim(lead: corral.Lead, name: str = "ann") -> Iterator[tuple[corral.Teammate, corral.Claim]]:
    """A teammate's first claim, its stream (Session or Idle) left open while the test uses it."""
    new = lead.add_teammate(name)
    with corral.Teammate.connect(lead.address, new.token) as mate:
        events = mate.idle(poll_interval=FAST_POLL)
        try:
            claim = next(events)
            assert isinstance(claim, corral.Claim), claim
            yield mate, claim
        finally:
            events.close()


def _big_file(path: Path, size: int) -> str:
    """A file of `size` bytes that repeat no MiB (so no piece is a copy of another); its SHA-256."""
    digest = hashlib.sha256()
    with path.open("wb") as file:
        for index in range(size // MiB):
            piece = index.to_bytes(4, "big") * (MiB // 4)
            digest.update(piece)
            file.write(piece)
    return digest.hexdigest()


def test_put_artifact_from_bytes_text_and_a_streamed_file_and_read_them_back(lead: corral.Lead, tmp_path: Path) -> None:
    lead.create_tasks([corral.TaskSpec("t")])
    big = tmp_path / "build-log.txt"
    big_sha = _big_file(big, 20 * MiB)
    binary = bytes(range(256)) * 10
    with _held_claim(lead) as (_, claim):
        from_bytes = claim.put_artifact("out/blob.bin", binary)
        from_text = claim.put_artifact("reports/summary.md", "# Done\né\n", media_type="text/markdown")
        tracemalloc.start()
        try:
            from_file = claim.put_artifact("build-log.txt", big)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        again = claim.put_artifact("reports/summary.md", "# Done\né\n", media_type="text/markdown")
        claim.complete("ok")
    # A 20 MiB file read whole would show a peak of 20 MiB at least; streamed, a few pieces of 1 MiB.
    assert peak < 8 * MiB, f"the upload held {peak} bytes of Python objects at once"
    assert (from_bytes.name, from_bytes.media_type, from_bytes.size, from_bytes.sha256, from_bytes.attempt) == (
        "out/blob.bin",
        "application/octet-stream",
        len(binary),
        _sha(binary),
        1,
    )
    text = "# Done\né\n".encode()
    assert (from_text.media_type, from_text.size, from_text.sha256) == ("text/markdown", len(text), _sha(text))
    assert (from_file.media_type, from_file.size, from_file.sha256) == ("text/plain", 20 * MiB, big_sha)
    assert from_file.create_time.tzinfo is not None
    # The same bytes under the same name again (as a retried upload would be): one entry still.
    assert (again.sha256, again.attempt) == (from_text.sha256, from_text.attempt)

    task = lead.get_task("t")
    assert [a.name for a in task.artifacts] == ["build-log.txt", "out/blob.bin", "reports/summary.md"]
    assert task.artifacts[0] == from_file and task.artifacts[1] == from_bytes
    assert [t.artifacts for t in lead.list_tasks()] == [task.artifacts], "list_tasks fills them too"

    assert lead.get_artifact("t", "out/blob.bin") == binary
    assert lead.get_artifact("t", "reports/summary.md", sha256=from_text.sha256) == text
    target = tmp_path / "copy" / "build-log.txt"
    target.parent.mkdir()
    assert lead.get_artifact("t", "build-log.txt", to=target, sha256=big_sha) == target
    assert target.stat().st_size == 20 * MiB and _sha(target.read_bytes()) == big_sha
    assert os.listdir(target.parent) == ["build-log.txt"], "no temporary file left beside it"


def test_a_dependent_handler_sees_its_dependencies_artifacts_and_downloads_them(lead: corral.Lead) -> None:
    lead.create_tasks([corral.TaskSpec("make"), corral.TaskSpec("use", depends_on=("make",))])
    reader = corral.Lead.connect(lead.address, lead.token)

    def handler(task: corral.Task) -> bytes:
        claim = corral.current_claim()
        if task.id == "make":
            claim.put_artifact("data.json", b'{"rows": 3}')
            return b"made"
        (dependency,) = claim.dependency_artifacts
        assert dependency.task_id == "make" and dependency.artifact.name == "data.json"
        assert dependency.artifact.media_type == "application/json"
        artifact = dependency.artifact
        return reader.get_artifact(dependency.task_id, artifact.name, sha256=artifact.sha256)

    try:
        mate = TeammateThread(lead, "ann", handler, max_idle_polls=3).start()
        watch_until(lead, task_reached("use", corral.TaskState.COMPLETED))
        assert lead.get_task("use").result == b'{"rows": 3}'
        assert mate.result().completed == 2
    finally:
        reader.close()


def test_refusals_map_to_typed_exceptions_and_attach_nothing(tmp_path: Path) -> None:
    limits = ["--max-artifact-bytes", "1000", "--max-artifact-store-bytes", "1500"]
    with corral.Lead.launch(tmp_path / "state", extra_args=limits) as lead:
        lead.create_tasks([corral.TaskSpec("t"), corral.TaskSpec("u")])
        with _held_claim(lead) as (_, claim):
            with pytest.raises(corral.LimitExceeded) as limit:
                claim.put_artifact("big.bin", b"x" * 1001)
            assert limit.value.reason == "ARTIFACT_LIMIT"
            for name in ("../escape", "/abs", "a" * 201):
                with pytest.raises(corral.InvalidArgument) as bad:
                    claim.put_artifact(name, b"x")
                assert bad.value.field_violations[0].field == "header.name", name
            with pytest.raises(corral.InvalidArgument) as media:
                claim.put_artifact("a.txt", b"x", media_type="not a type")
            assert media.value.field_violations[0].field == "header.media_type"
            with pytest.raises(corral.InvalidArgument, match="data_or_path"):
                claim.put_artifact("a.txt", 42)  # type: ignore[arg-type]
            with pytest.raises(corral.InvalidArgument, match="data_or_path"):
                claim.put_artifact("a.txt", tmp_path / "missing")
            claim.put_artifact("first.bin", b"a" * 800)
            with pytest.raises(corral.LimitExceeded) as quota:
                claim.put_artifact("second.bin", b"b" * 800)
            assert quota.value.reason == "ARTIFACT_QUOTA"
            assert [a.name for a in lead.get_task(claim.task.id).artifacts] == ["first.bin"]

            lead.revoke_claim(claim.task.id, "taken back")
            with pytest.raises(corral.ClaimRevoked):
                claim.put_artifact("late.txt", "too late")
            assert claim.lost, "the refusal proves the claim dead"
            assert [a.name for a in lead.get_task(claim.task.id).artifacts] == ["first.bin"]

        with pytest.raises(corral.NotFound) as missing:
            lead.get_artifact("t", "nope.txt")
        assert missing.value.reason == "ARTIFACT_NOT_FOUND"
        target = tmp_path / "out" / "first.bin"
        target.parent.mkdir()
        with pytest.raises(corral.CorralError, match="SHA-256"):
            lead.get_artifact("t", "first.bin", to=target, sha256="0" * 64)
        assert os.listdir(target.parent) == [], "a refused download leaves no file, whole or partial"
        with pytest.raises(corral.NotFound):
            lead.get_artifact("t", "nope.txt", to=target)
        assert os.listdir(target.parent) == []


def test_aio_put_and_get_and_watch_tells_artifact_added(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with await corral.aio.Lead.launch(tmp_path / "state") as lead:
            await lead.create_tasks([corral.TaskSpec("t")])
            new = await lead.add_teammate("ann")
            async with await corral.aio.Teammate.connect(lead.address, new.token) as ann:
                async with contextlib.aclosing(ann.idle(poll_interval=FAST_POLL)) as events:
                    claim = await anext(events)
                    assert isinstance(claim, corral.aio.Claim), claim
                    path = tmp_path / "notes.txt"
                    path.write_text("line\n" * 1000)
                    stored = await claim.put_artifact("notes.txt", path)
                    await claim.complete("ok")
            assert (stored.media_type, stored.size) == ("text/plain", 5000)
            assert (await lead.get_task("t")).artifacts == (stored,)
            assert await lead.get_artifact("t", "notes.txt") == path.read_bytes()
            target = await lead.get_artifact("t", "notes.txt", to=tmp_path / "copy.txt")
            assert target.read_bytes() == path.read_bytes()
            async with contextlib.aclosing(lead.watch(0, timeout=30)) as watch:
                async for event in watch:
                    if isinstance(event, corral.ArtifactAdded):
                        assert (event.task_id, event.teammate, event.artifact) == ("t", "ann", stored)
                        return
            raise AssertionError("no ArtifactAdded event")

    asyncio.run(scenario())
