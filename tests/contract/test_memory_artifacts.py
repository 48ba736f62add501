"""The daemon's memory follows what it sends and receives, not what it stores: a 256 MiB
upload or download, or 100 slow GetArtifact or TailOutput readers, grow its resident
memory (VmRSS, sampled every 10 ms) by less than 64 MiB.

An upload holds one data message at a time (service/artifacts.py); a download, and
each reader, a few copies of one chunk (`artifacts.CHUNK_BYTES`, `output.CHUNK_BYTES`):
at 256 KiB a chunk, the 100 artifact readers grew it by 113 MiB. A case that reads
measures a daemon restarted after its data was made, so what making it cost is not
counted. Each prints its figures (pytest -s). They time the daemon's own work: SQLite
only.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import threading
import time
from collections.abc import Callable, Iterator

import grpc
import pytest

from corral.v1 import corral_pb2 as pb
from tests.support.memory import peak_rss

from .test_memory import GROWTH_LIMIT_MIB
from .wire import Client, Daemon, spec

MIB = 1024 * 1024
BIG = 256 * MIB  # the largest artifact a daemon takes by default
# What each slow reader reads: 64 chunks. A reader is bounded by what it holds, a few chunks,
# whatever the size read: one that held its whole artifact or output (or read far ahead)
# would cost the daemon 400 MiB for the hundred, one that held 1 MiB 100 MiB, past the
# limit either way. (16 MiB, the default limit of one attempt's output, tells no more and
# sent 1.6 GB over the connections per case: 12-18 s of a paired run.)
MEDIUM = 4 * MIB
READERS = 100
# How long each slow reader holds its stream after its first chunk: the daemon's part
# of it (what it reads ahead and what gRPC holds) is in place well before that.
STALL_S = 2.0
# Each reader a client of its own: a connection of its own, as separate processes would have.
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]


def report(case: str, memory: dict[str, float]) -> float:
    growth = memory["peak"] - memory["start"]
    print(f"\n{case}: RSS {memory['start']:.1f} MiB -> peak {memory['peak']:.1f} MiB (growth {growth:.1f} MiB)")
    return growth


def held_claim(daemon: Daemon, task_id: str) -> tuple[Client, pb.Claim]:
    """A teammate's claim of a new task (its Idle stream closed: the claim stays held)."""
    mate = daemon.add_teammate()
    daemon.create_tasks(spec(task_id, lease=600))
    stream = mate.idle()
    claim = stream.next_event("claim", timeout=5.0)
    stream.cancel()
    return mate, claim


def upload_requests(claim: pb.Claim, name: str, size: int, block: bytes) -> Iterator[pb.PutArtifactRequest]:
    """The header, then `size` bytes in messages of len(block): made as they are sent."""
    yield pb.PutArtifactRequest(
        header=pb.ArtifactHeader(task_id=claim.task.id, claim_token=claim.claim_token, name=name)
    )
    for _ in range(size // len(block)):
        yield pb.PutArtifactRequest(data=block)


def digest_of(block: bytes, size: int) -> str:
    hasher = hashlib.sha256()
    for _ in range(size // len(block)):
        hasher.update(block)
    return hasher.hexdigest()


def put_artifact(daemon: Daemon, name: str, size: int) -> tuple[pb.Artifact, bytes]:
    """Uploads `size` bytes (one random MiB repeated) to a new task's claim; returns the
    answer and the block."""
    mate, claim = held_claim(daemon, name)
    block = os.urandom(MIB)
    answer = mate.teammate.PutArtifact(upload_requests(claim, name, size, block), timeout=120)
    assert (answer.size, answer.sha256) == (size, digest_of(block, size))
    return answer, block


def restarted(daemon: Daemon) -> Daemon:
    """The daemon restarted, and a call served: the process the case measures."""
    daemon.restart()
    daemon.stats()
    return daemon


# ---------------------------------------------------------------- one big transfer


@pytest.mark.timeout(180)
def test_a_256_mib_upload_grows_the_daemon_by_less_than_64_mib(corrald):
    daemon = corrald()
    mate, claim = held_claim(daemon, "big")
    block = os.urandom(MIB)
    with peak_rss(daemon.pid) as memory:
        began = time.monotonic()
        answer = mate.teammate.PutArtifact(upload_requests(claim, "big.bin", BIG, block), timeout=150)
        took = time.monotonic() - began
    assert (answer.size, answer.sha256) == (BIG, digest_of(block, BIG))
    growth = report(f"256 MiB upload ({took:.2f} s)", memory)
    assert growth < GROWTH_LIMIT_MIB, f"a 256 MiB upload grew RSS by {growth:.0f} MiB"


@pytest.mark.timeout(180)
def test_a_256_mib_download_grows_the_daemon_by_less_than_64_mib(corrald):
    daemon = corrald()
    answer, _ = put_artifact(daemon, "big", BIG)
    restarted(daemon)
    hasher = hashlib.sha256()
    received = 0
    with peak_rss(daemon.pid) as memory:
        began = time.monotonic()
        for chunk in daemon.lead.board.GetArtifact(pb.GetArtifactRequest(task_id="big", name="big"), timeout=150):
            hasher.update(chunk.data)
            received += len(chunk.data)
        took = time.monotonic() - began
    assert (received, hasher.hexdigest()) == (BIG, answer.sha256)
    growth = report(f"256 MiB download ({took:.2f} s)", memory)
    assert growth < GROWTH_LIMIT_MIB, f"a 256 MiB download grew RSS by {growth:.0f} MiB"


# ---------------------------------------------------------------- many slow readers


def slow_readers(
    daemon: Daemon, open_stream: Callable[[Client], Iterator], summary: Callable[[Iterator], tuple]
) -> tuple[dict[str, float], set[tuple]]:
    """READERS clients each open a stream, take one message, hold it STALL_S, then read on
    to the end. Returns the daemon's RSS (start, peak, and the peak once every reader held
    its first message and after the stall) and what `summary` made of each stream's
    messages (read as they come: the test process holds no stream whole)."""
    channels = [grpc.insecure_channel(daemon.address, options=OWN_CONNECTION) for _ in range(READERS)]
    first = threading.Barrier(READERS + 1)
    release = threading.Event()
    results: list[tuple] = []
    failures: list[BaseException] = []

    def read(index: int) -> None:
        try:
            stream = open_stream(Client(channels[index], daemon.lead_token, "lead"))
            held = next(stream)
            first.wait(60)
            release.wait(60)
            results.append(summary(itertools.chain([held], stream)))
        except BaseException as error:  # noqa: BLE001 (reported on the test's thread)
            failures.append(error)
            first.abort()

    threads = [threading.Thread(target=read, args=(n,), name=f"reader {n}") for n in range(READERS)]
    try:
        with peak_rss(daemon.pid) as memory:
            for thread in threads:
                thread.start()
            first.wait(60)  # every reader has its first message and holds its stream
            memory["held"] = memory["peak"]
            release.wait(STALL_S)  # the readers stall: nothing sets it before
            memory["stalled"] = memory["peak"]
            release.set()
            for thread in threads:
                thread.join(120)
    finally:
        release.set()
        for channel in channels:
            channel.close()
    assert not failures, failures[:3]
    assert not [t.name for t in threads if t.is_alive()], "a reader did not finish"
    assert len(results) == READERS
    return memory, set(results)


def report_readers(case: str, memory: dict[str, float]) -> float:
    growth = report(case, memory)
    print(
        f"  the peak once every reader held a message: {memory['held']:.1f}, after the stall: {memory['stalled']:.1f}"
    )
    return growth


@pytest.mark.timeout(240)
def test_100_slow_get_artifact_readers_grow_the_daemon_by_less_than_64_mib(corrald):
    daemon = corrald(extra_args=["--streams-per-identity", str(READERS)])
    answer, _ = put_artifact(daemon, "medium", MEDIUM)
    restarted(daemon)

    def summary(chunks: Iterator[pb.ArtifactChunk]) -> tuple:
        hasher, size = hashlib.sha256(), 0
        for chunk in chunks:
            hasher.update(chunk.data)
            size += len(chunk.data)
        return size, hasher.hexdigest()

    request = pb.GetArtifactRequest(task_id="medium", name="medium")
    memory, read = slow_readers(daemon, lambda client: client.board.GetArtifact(request, timeout=180), summary)
    assert read == {(MEDIUM, answer.sha256)}, "every reader got the whole artifact"
    growth = report_readers(f"{READERS} slow GetArtifact readers of {MEDIUM // MIB} MiB", memory)
    assert growth < GROWTH_LIMIT_MIB, f"{READERS} slow readers of an artifact grew RSS by {growth:.0f} MiB"


@pytest.mark.timeout(240)
def test_100_slow_tail_output_readers_grow_the_daemon_by_less_than_64_mib(corrald):
    daemon = corrald(extra_args=["--streams-per-identity", str(READERS)])
    mate, claim = held_claim(daemon, "out")
    piece = 64 * 1024  # the most one append takes
    block = os.urandom(piece)
    for _ in range(MEDIUM // piece):
        mate.teammate.AppendOutput(pb.AppendOutputRequest(task_id="out", claim_token=claim.claim_token, data=block))
    mate.complete(claim)
    restarted(daemon)

    def summary(chunks: Iterator[pb.OutputChunk]) -> tuple:
        hasher, offset, ended = hashlib.sha256(), 0, False
        for chunk in chunks:
            assert chunk.offset == offset and not ended
            hasher.update(chunk.data)
            offset += len(chunk.data)
            ended = chunk.end
        return offset, ended, hasher.hexdigest()

    request = pb.TailOutputRequest(task_id="out")
    memory, read = slow_readers(daemon, lambda client: client.board.TailOutput(request, timeout=180), summary)
    assert read == {(MEDIUM, True, digest_of(block, MEDIUM))}, "every reader got the whole output, then its end"
    growth = report_readers(f"{READERS} slow TailOutput readers of {MEDIUM // MIB} MiB", memory)
    assert growth < GROWTH_LIMIT_MIB, f"{READERS} slow readers of an output grew RSS by {growth:.0f} MiB"
