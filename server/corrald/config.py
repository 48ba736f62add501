"""Defaults and limits (design §7) in one frozen place.

Every limit is enforced by refusing, never by clamping.
"""

from __future__ import annotations

import dataclasses


class ConfigError(Exception):
    """The serve configuration cannot work; the message says why."""


SECOND_MS = 1000
MINUTE_MS = 60 * SECOND_MS
HOUR_MS = 60 * MINUTE_MS
KIB = 1024
MIB = 1024 * KIB
# How much of its dependencies' results a claim carries.
DEPENDENCY_RESULTS_MAX_BYTES = 4 * MIB
# The largest request message the daemon takes (gRPC's receive limit; each
# message of a Session stream counts alone). It is set from the largest
# request the limits below admit: a CancelTasks or RetryTasks of `batch_max`
# (10,000) ids of `name_max_chars` (128) characters of four UTF-8 bytes each,
# 10,000 x (512 + 3 bytes of field tag and length) = 5,150,000 bytes (4.9 MiB).
# Next come one task spec at every limit (a 1 MiB payload, 64 KiB of
# description, 1,000 dependencies of 515 bytes: 1.55 MiB) and a 1 MiB result
# (CompleteTask, or a Session op: 1.0 MiB). 6 MiB holds the largest with room.
# A CreateTasks batch may hold more than that (10,000 specs of up to 1.55 MiB
# each), so a bigger batch is sent in parts, each depending only on itself and
# the parts before it. A bigger message is refused by gRPC as it arrives, on
# its length prefix alone, with RESOURCE_EXHAUSTED and nothing read or parsed;
# at 64 MiB, 24 concurrent 40 MiB requests, all refused, took the daemon from
# 51 MiB to 2.3 GiB. `tests/server/test_message_limit.py` builds each of these.
MESSAGE_MAX_BYTES = 6 * MIB


@dataclasses.dataclass(frozen=True)
class Limits:
    lease_default_ms: int = 60 * SECOND_MS
    lease_min_ms: int = 1 * SECOND_MS
    lease_max_ms: int = 24 * HOUR_MS
    max_attempts_default: int = 3
    # Retry backoff as a Temporal user expects it: 1 s, doubling, at most 100x the first.
    retry_backoff_default_ms: int = 1 * SECOND_MS
    retry_backoff_max_ms: int = 1 * HOUR_MS
    retry_backoff_growth_max: int = 100  # the default cap, as a multiple of the first wait
    retry_backoff_cap_max_ms: int = 100 * HOUR_MS
    attempt_timeout_min_ms: int = 1 * SECOND_MS
    attempt_timeout_max_ms: int = 7 * 24 * HOUR_MS
    not_before_ahead_max_ms: int = 365 * 24 * HOUR_MS
    max_attempts_max: int = 100
    poll_interval_default_ms: int = 5 * SECOND_MS
    poll_interval_min_ms: int = 50
    poll_interval_max_ms: int = 10 * MINUTE_MS
    max_idle_polls_default: int = 12
    max_idle_polls_max: int = 10_000
    slots_default: int = 1
    slots_max: int = 64
    grace_default_ms: int = 5 * MINUTE_MS
    grace_min_ms: int = 1 * SECOND_MS
    grace_max_ms: int = 24 * HOUR_MS
    batch_max: int = 10_000
    concurrency_key_max_chars: int = 200
    concurrency_limit_max: int = 10_000  # tasks of one key IN_PROGRESS at once
    # One batch is one writer job: these keep it within the job budget
    # (server/DESIGN.md) and its reply under a default client's 4 MiB.
    batch_deps_max: int = 50_000
    batch_id_bytes_max: int = 2 * MIB
    title_max_chars: int = 200
    text_max_bytes: int = 64 * KIB
    progress_max_bytes: int = 1 * KIB
    model_max_chars: int = 200
    blob_max_bytes: int = 1 * MIB
    deps_per_task_max: int = 1_000
    unacked_inbox_max: int = 10_000
    name_max_chars: int = 128
    roles_max: int = 32
    priority_min: int = -1_000_000
    priority_max: int = 1_000_000
    page_size_default: int = 100
    page_size_max: int = 1_000
    # A server stream whose client has not taken a message for this long is
    # ended with UNAVAILABLE (reason SLOW_CONSUMER); see service/sending.py.
    stream_send_timeout_ms: int = 60 * SECOND_MS
    # A task's live output (AppendOutput, TailOutput): one append, and what one
    # attempt keeps in all (`--max-output-bytes`; past it OUTPUT_LIMIT).
    output_append_max_bytes: int = 64 * KIB
    output_max_bytes: int = 16 * MIB
    # Artifacts (PutArtifact): one data message, one artifact (`--max-artifact-bytes`;
    # past it ARTIFACT_LIMIT), and the board's stored contents, each counted once
    # (`--max-artifact-store-bytes`; past it ARTIFACT_QUOTA).
    artifact_chunk_max_bytes: int = 1 * MIB
    artifact_max_bytes: int = 256 * MIB
    artifact_store_max_bytes: int = 10 * 1024 * MIB


@dataclasses.dataclass(frozen=True)
class WriterLevels:
    """Queue-depth levels from the single-writer proposal."""

    record: int = 10
    warn: int = 50
    degraded: int = 100
    refuse: int = 500


@dataclasses.dataclass(frozen=True)
class WriterConfig:
    max_batch: int = 64
    # Past this, a batch takes only jobs of callers with none in it yet, so one
    # caller's backlog cannot keep a group commit going (see writer.py).
    batch_budget_ms: float = 2.0
    levels: WriterLevels = WriterLevels()
    synchronous: str = "FULL"
    busy_timeout_ms: int = 5000
    busy_retries: int = 8
    # An async caller that finds the queue full waits this long for a place
    # before it is refused: a burst is absorbed, a sustained overload is not
    # (overload/queue_bound.py).
    room_wait_ms: int = 2000
    # Writer threads, each with its own connection: one on SQLite (the file has one
    # writer); on PostgreSQL `--pg-writers` (see writer.py).
    writers: int = 1
