"""Artifacts through the wire, on SQLite and PostgreSQL: PutArtifact from a live claim (made on
Idle or on a Session), GetArtifact back byte for byte with its SHA-256, Task.artifacts and a
dependent's Claim.dependency_artifacts, Watch's artifact_added; a 50 MiB file surviving a
restart; an upload whose claim dies mid-way attached nowhere and its bytes gone after a
restart; the limit and the quota; every bad input refused with its status and field, nothing
stored; who may read which artifact."""

from __future__ import annotations

import hashlib
import os
import pathlib
import sqlite3
import threading
from collections.abc import Iterable, Iterator

import grpc
import pytest

from corral.v1 import corral_pb2 as pb
from tests.support import wait_until

from .wire import STREAM_TIMEOUT_S, assert_status, rpc_error, spec

pytestmark = pytest.mark.timeout(120)

MIB = 1024 * 1024


# ---------------------------------------------------------------- helpers


def header(claim: pb.Claim, name: str = "out/report.txt", media_type: str = "text/plain") -> pb.PutArtifactRequest:
    return pb.PutArtifactRequest(
        header=pb.ArtifactHeader(task_id=claim.task.id, claim_token=claim.claim_token, name=name, media_type=media_type)
    )


def chunks_of(data: bytes, size: int = MIB) -> Iterator[pb.PutArtifactRequest]:
    for at in range(0, len(data), size):
        yield pb.PutArtifactRequest(data=data[at : at + size])


def put(mate, claim: pb.Claim, data: bytes, name: str = "out/report.txt", media_type: str = "text/plain"):
    return mate.teammate.PutArtifact(iter([header(claim, name, media_type), *chunks_of(data)]), timeout=60)


def get(client, task_id: str, name: str) -> bytes:
    stream = client.board.GetArtifact(pb.GetArtifactRequest(task_id=task_id, name=name), timeout=STREAM_TIMEOUT_S)
    return b"".join(chunk.data for chunk in stream)


def _board_rows(daemon) -> tuple[list[tuple], list[str]]:
    """(the artifacts table, the stored blobs and temporary files), read from the store itself."""
    if os.environ.get("CORRAL_TEST_STORE", "sqlite") != "postgres":
        database = pathlib.Path(daemon.state_dir) / "corral.sqlite3"
        with sqlite3.connect(database) as conn:
            rows = conn.execute("SELECT task_seq, attempt, name, size, sha256 FROM artifacts ORDER BY seq").fetchall()
        root = pathlib.Path(daemon.state_dir) / "artifacts"
        files = sorted(str(path.relative_to(root)) for path in root.rglob("*") if path.is_file())
        return rows, files
    import psycopg  # noqa: PLC0415 (the SQLite run loads nothing of it)

    from tests.support.daemons import store_args  # noqa: PLC0415
    from tests.support.postgres import run_database_dsn  # noqa: PLC0415

    schema = store_args(daemon.state_dir)[-1]
    with psycopg.connect(run_database_dsn(), options=f"-c search_path={schema}") as conn:
        rows = conn.execute("SELECT task_seq, attempt, name, size, sha256 FROM artifacts ORDER BY seq").fetchall()
        uploads = conn.execute("SELECT coalesce(sha256, 'partial-' || id) FROM artifact_uploads ORDER BY 1").fetchall()
        chunks = conn.execute(
            "SELECT count(*) FROM artifact_chunks AS k WHERE NOT EXISTS"
            " (SELECT 1 FROM artifact_uploads AS u WHERE u.id = k.upload AND u.sha256 IS NOT NULL)"
        ).fetchone()
    # Chunks of no complete upload (a partial one's), listed as such.
    extra = [f"chunks={chunks[0]}"] if chunks[0] else []
    return [tuple(row) for row in rows], [*(upload for (upload,) in uploads), *extra]


def _blob_names(files: Iterable[str]) -> set[str]:
    """The content names among `_board_rows`' files (SQLite: ab/abcd…; PostgreSQL: the SHA-256)."""
    return {name.rsplit("/", 1)[-1] for name in files if not name.startswith(("partial-", "chunks=", ".upload-"))}


# ---------------------------------------------------------------- round trips


@pytest.mark.parametrize("transport", ["idle", "session"])
def test_an_artifact_round_trips_and_shows_on_the_task_the_dependent_claim_and_watch(daemon, transport):
    ann = daemon.add_teammate("ann")
    bob = daemon.add_teammate("bob", roles=["r-bob"])
    daemon.create_tasks(spec("a"), spec("b", "a", required_role="r-bob"))
    watch = daemon.watch()
    stream = ann.session() if transport == "session" else ann.idle()
    claim = stream.next_event("claim", timeout=5.0)
    data = os.urandom(3 * MIB + 17)
    answer = put(ann, claim, data)
    assert (answer.name, answer.media_type, answer.size, answer.attempt) == (
        "out/report.txt",
        "text/plain",
        len(data),
        1,
    )
    assert answer.sha256 == hashlib.sha256(data).hexdigest()
    assert answer.create_time.seconds > 0
    empty = put(ann, claim, b"", name="empty", media_type="")
    assert (empty.size, empty.media_type) == (0, "application/octet-stream")
    assert empty.sha256 == hashlib.sha256(b"").hexdigest()
    assert get(daemon.lead, "a", "out/report.txt") == data
    assert get(daemon.lead, "a", "empty") == b""
    assert [a.name for a in daemon.get_task("a").artifacts] == ["empty", "out/report.txt"]
    assert list(daemon.get_task("a").artifacts)[1] == answer
    listed = {t.id: t for t in daemon.lead.board.ListTasks(pb.ListTasksRequest()).tasks}
    assert list(listed["a"].artifacts) == [empty, answer] and not listed["b"].artifacts
    added = watch.next_matching(lambda r: r.WhichOneof("event") == "artifact_added", timeout=5.0)
    assert added.artifact_added == pb.ArtifactAdded(task_id="a", teammate="ann", artifact=answer)
    if transport == "session":
        stream.complete(claim)
    else:
        ann.complete(claim)
    # The dependent's claim carries references, on Idle and, sent again to a new stream, on a Session.
    for opened in (bob.idle, bob.session):
        bob_stream = opened()
        dependent = bob_stream.next_event("claim", timeout=5.0)
        assert dependent.task.id == "b"
        assert [(d.task_id, d.artifact) for d in dependent.dependency_artifacts] == [("a", empty), ("a", answer)]
        bob_stream.cancel()
        bob_stream.wait_end(5)
    assert get(bob, "a", "out/report.txt") == data, "a teammate reads its task's dependency's artifact"
    stream.cancel()
    watch.cancel()


def test_a_later_attempt_supersedes_a_name_and_the_history_keeps_both(daemon):
    ann = daemon.add_teammate("ann")
    daemon.create_tasks(spec("a", max_attempts=3))
    stream = ann.idle()
    first = stream.next_event("claim", timeout=5.0)
    one = put(ann, first, b"first", name="log")
    kept = put(ann, first, b"only in the first", name="first-only")
    ann.teammate.FailTask(pb.FailTaskRequest(task_id="a", claim_token=first.claim_token, error="x", retryable=True))
    second = stream.next_event("claim", timeout=10.0)
    assert [a.name for a in second.task.artifacts] == ["first-only", "log"], "a retry's claim shows the artifacts"
    two = put(ann, second, b"second", name="log")
    assert (one.attempt, two.attempt) == (1, 2)
    assert list(daemon.get_task("a").artifacts) == [kept, two]
    assert get(daemon.lead, "a", "log") == b"second"
    rows, _ = _board_rows(daemon)
    assert [(row[1], row[2]) for row in rows] == [(1, "log"), (1, "first-only"), (2, "log")]
    stream.cancel()


def test_fifty_mib_round_trips_with_its_sha256_and_survives_a_restart(corrald):
    daemon = corrald()
    ann = daemon.add_teammate("ann")
    daemon.create_tasks(spec("a"))
    stream = ann.idle()
    claim = stream.next_event("claim", timeout=5.0)
    data = os.urandom(50 * MIB)
    digest = hashlib.sha256(data).hexdigest()
    answer = put(ann, claim, data, name="big.bin", media_type="application/octet-stream")
    assert (answer.size, answer.sha256) == (len(data), digest)
    stream.cancel()
    daemon.restart()
    assert hashlib.sha256(get(daemon.lead, "a", "big.bin")).hexdigest() == digest
    assert list(daemon.get_task("a").artifacts) == [answer]
    rows, files = _board_rows(daemon)
    assert _blob_names(files) == {digest}


# ---------------------------------------------------------------- dead claims


def test_an_upload_whose_task_is_canceled_mid_way_is_refused_and_its_bytes_go_at_restart(corrald):
    daemon = corrald()
    ann = daemon.add_teammate("ann")
    daemon.create_tasks(spec("kept"), spec("a"))
    stream = ann.idle(slots=2)
    claims = {c.task.id: c for c in (stream.next_event("claim", timeout=5.0) for _ in range(2))}
    before = put(ann, claims["kept"], b"committed before", name="kept.txt")
    files_before = _board_rows(daemon)[1]
    sent_some = threading.Event()
    go_on = threading.Event()

    def requests():
        yield header(claims["a"], name="cut.bin")
        yield pb.PutArtifactRequest(data=b"x" * MIB)
        sent_some.set()
        assert go_on.wait(30)
        yield pb.PutArtifactRequest(data=b"y" * MIB)

    outcome: list = []
    call = threading.Thread(target=lambda: outcome.append(rpc_error(ann.teammate.PutArtifact, requests(), timeout=60)))
    call.start()
    assert sent_some.wait(10)
    # The upload's first bytes are stored (past the header's check), then the Lead cancels the task.
    wait_until(lambda: set(_board_rows(daemon)[1]) != set(files_before), 20, "the upload's first stored bytes")
    daemon.lead.lead.CancelTasks(pb.CancelTasksRequest(ids=["a"]))
    go_on.set()
    call.join(60)
    assert_status(outcome[0], grpc.StatusCode.FAILED_PRECONDITION, reason="TASK_CANCELED")
    assert not daemon.get_task("a").artifacts
    rows, _ = _board_rows(daemon)
    assert [row[2] for row in rows] == ["kept.txt"]
    stream.cancel()
    daemon.restart()
    rows, files = _board_rows(daemon)
    assert [row[2] for row in rows] == ["kept.txt"]
    assert _blob_names(files) == {before.sha256}, files
    assert not [name for name in files if name.startswith(("partial-", ".upload-"))], files
    assert get(daemon.lead, "kept", "kept.txt") == b"committed before"


def test_a_dead_claim_and_a_non_holder_are_refused_at_the_header(daemon):
    ann = daemon.add_teammate("ann")
    bob = daemon.add_teammate("bob")
    daemon.create_tasks(spec("a"))
    stream = ann.idle()
    claim = stream.next_event("claim", timeout=5.0)
    error = rpc_error(bob.teammate.PutArtifact, iter([header(claim), pb.PutArtifactRequest(data=b"x")]))
    assert_status(error, grpc.StatusCode.FAILED_PRECONDITION, reason="CLAIM_TOKEN_MISMATCH")
    ann.complete(claim)
    error = rpc_error(ann.teammate.PutArtifact, iter([header(claim), pb.PutArtifactRequest(data=b"x")]))
    assert_status(error, grpc.StatusCode.FAILED_PRECONDITION, reason="CLAIM_TOKEN_MISMATCH")
    assert _board_rows(daemon) == ([], [])
    stream.cancel()


# ---------------------------------------------------------------- limits and bad input


def test_the_artifact_limit_and_the_quota_refuse_and_store_nothing(corrald):
    daemon = corrald(extra_args=["--max-artifact-bytes", str(2 * MIB), "--max-artifact-store-bytes", str(3 * MIB)])
    ann = daemon.add_teammate("ann")
    daemon.create_tasks(spec("a"))
    stream = ann.idle()
    claim = stream.next_event("claim", timeout=5.0)
    assert_status(
        rpc_error(put, ann, claim, b"x" * (2 * MIB + 1)), grpc.StatusCode.RESOURCE_EXHAUSTED, reason="ARTIFACT_LIMIT"
    )
    first = put(ann, claim, b"a" * (2 * MIB), name="one")
    # The same content again adds nothing to the board's stored bytes.
    again = put(ann, claim, b"a" * (2 * MIB), name="same-bytes")
    assert again.sha256 == first.sha256
    assert_status(
        rpc_error(put, ann, claim, b"b" * (MIB + 1), name="two"),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        reason="ARTIFACT_QUOTA",
    )
    assert put(ann, claim, b"c" * MIB, name="fits").size == MIB
    assert [a.name for a in daemon.get_task("a").artifacts] == ["fits", "one", "same-bytes"]
    rows, _ = _board_rows(daemon)
    assert [row[2] for row in rows] == ["one", "same-bytes", "fits"]
    stream.cancel()


def test_every_bad_upload_is_refused_with_its_field_and_stores_nothing(daemon):
    ann = daemon.add_teammate("ann")
    daemon.create_tasks(spec("a"))
    stream = ann.idle()
    claim = stream.next_event("claim", timeout=5.0)
    data = pb.PutArtifactRequest(data=b"x")
    cases = [
        ([header(claim, name="../up")], "header.name"),
        ([header(claim, name="a/../b")], "header.name"),
        ([header(claim, name="n" * 201)], "header.name"),
        ([header(claim, name="/abs")], "header.name"),
        ([header(claim, name="a//b")], "header.name"),
        ([header(claim, name="a\\b")], "header.name"),
        ([header(claim, name="a\x00b")], "header.name"),
        ([header(claim, name="")], "header.name"),
        ([header(claim, media_type="text")], "header.media_type"),
        ([header(claim, media_type="text/plain; charset=utf-8")], "header.media_type"),
        ([header(claim, media_type="te xt/plain")], "header.media_type"),
        ([header(claim), pb.PutArtifactRequest(data=b"x" * (MIB + 1))], "data"),
        ([data, header(claim)], "header"),
        ([], "header"),
        ([header(claim), data, header(claim)], "header"),
        ([pb.PutArtifactRequest(header=pb.ArtifactHeader(claim_token="t", name="n"))], "header.task_id"),
        ([pb.PutArtifactRequest(header=pb.ArtifactHeader(task_id="a", name="n"))], "header.claim_token"),
    ]
    for requests, field in cases:
        error = rpc_error(ann.teammate.PutArtifact, iter(requests))
        assert_status(error, grpc.StatusCode.INVALID_ARGUMENT, field=field)
    assert put(ann, claim, b"fine", name="n" * 200).size == 4, "200 characters is a name"
    rows, files = _board_rows(daemon)
    assert [row[2] for row in rows] == ["n" * 200]
    assert len(_blob_names(files)) == 1
    assert not daemon.get_task("a").artifacts[0].name.startswith("/")
    stream.cancel()


def test_who_may_read_which_artifact_and_unknown_names(daemon):
    ann = daemon.add_teammate("ann", roles=["r-ann"])
    bob = daemon.add_teammate("bob", roles=["r-bob"])
    cat = daemon.add_teammate("cat", roles=["r-cat"])
    viewer = daemon.client(daemon.lead.lead.AddViewer(pb.AddViewerRequest(name="eve")).token, "eve")
    daemon.create_tasks(
        spec("dep", required_role="r-ann"),
        spec("mine", "dep", required_role="r-bob"),
        spec("other", required_role="r-cat"),
    )
    ann_stream = ann.idle()
    dep = ann_stream.next_event("claim", timeout=5.0)
    put(ann, dep, b"dep file", name="f")
    ann.complete(dep)
    bob_stream = bob.idle()
    assert bob_stream.next_event("claim", timeout=5.0).task.id == "mine"
    cat_stream = cat.idle()
    other = cat_stream.next_event("claim", timeout=5.0)
    put(cat, other, b"other file", name="f")
    for client, task_id in ((daemon.lead, "dep"), (viewer, "other"), (ann, "dep"), (bob, "dep"), (cat, "other")):
        assert get(client, task_id, "f") in (b"dep file", b"other file")
    for client, task_id in ((cat, "dep"), (ann, "other"), (bob, "other")):
        assert_status(rpc_error(get, client, task_id, "f"), grpc.StatusCode.PERMISSION_DENIED)
    assert_status(rpc_error(get, daemon.lead, "dep", "g"), grpc.StatusCode.NOT_FOUND, reason="ARTIFACT_NOT_FOUND")
    assert_status(rpc_error(get, daemon.lead, "nope", "f"), grpc.StatusCode.NOT_FOUND, reason="TASK_NOT_FOUND")
    assert_status(rpc_error(get, daemon.lead, "dep", ""), grpc.StatusCode.INVALID_ARGUMENT, field="name")
    # A viewer uploads nothing.
    error = rpc_error(viewer.teammate.PutArtifact, iter([header(other), pb.PutArtifactRequest(data=b"x")]))
    assert_status(error, grpc.StatusCode.PERMISSION_DENIED)
    for stream in (ann_stream, bob_stream, cat_stream):
        stream.cancel()


def test_sigkill_during_an_upload_loses_nothing_committed_and_leaves_no_half_file(corrald):
    daemon = corrald()
    ann = daemon.add_teammate("ann")
    daemon.create_tasks(spec("kept"), spec("a"))
    stream = ann.idle(slots=2)
    claims = {c.task.id: c for c in (stream.next_event("claim", timeout=5.0) for _ in range(2))}
    before = put(ann, claims["kept"], b"committed before", name="kept.txt")
    _, files_before = _board_rows(daemon)
    stop = threading.Event()

    def requests():
        yield header(claims["a"], name="cut.bin")
        while not stop.is_set():
            yield pb.PutArtifactRequest(data=b"z" * MIB)

    outcome: list = []
    call = threading.Thread(target=lambda: outcome.append(rpc_error(ann.teammate.PutArtifact, requests(), timeout=60)))
    call.start()
    # Killed once the upload's bytes are being stored (a temporary file, or a partial upload's rows).
    wait_until(lambda: set(_board_rows(daemon)[1]) != set(files_before), 20, "the upload's first stored bytes")
    daemon.kill()
    stop.set()
    call.join(30)
    assert outcome and outcome[0].code() == grpc.StatusCode.UNAVAILABLE
    daemon.start()
    rows, files = _board_rows(daemon)
    assert [row[2] for row in rows] == ["kept.txt"]
    assert files == files_before, "a half-written upload, or an unnamed blob, outlived the restart"
    assert _blob_names(files) == {before.sha256}
    assert get(daemon.lead, "kept", "kept.txt") == b"committed before"
    assert [a.name for a in daemon.get_task("kept").artifacts] == ["kept.txt"]
