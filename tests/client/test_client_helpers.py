"""Small pure pieces: credentials, claim dedupe, handler outcomes, retry policy."""

import datetime
import time

import grpc
import pytest
import tenacity

import corral
from corral._channel import resolve_credentials, teammate_env
from corral._claimbook import ClaimBook
from corral._handling import MAX_ERROR_CHARS, RunOptions, Tally, describe_failure, encode_result, is_retryable
from corral._retry import _StopAfterOutage, _wait, is_transient
from corral._types import ClaimInfo, ExitReason, Task, TaskState


def test_credentials_come_from_arguments_then_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORRAL_ADDRESS", "unix:/env.sock")
    monkeypatch.setenv("CORRAL_TOKEN", "env-token\n")
    assert resolve_credentials(None, None) == ("unix:/env.sock", "env-token")
    assert resolve_credentials("unix:/arg.sock", "arg") == ("unix:/arg.sock", "arg")
    assert teammate_env("unix:/a", "t") == {"CORRAL_ADDRESS": "unix:/a", "CORRAL_TOKEN": "t"}


def test_missing_credentials_name_the_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CORRAL_ADDRESS", raising=False)
    monkeypatch.delenv("CORRAL_TOKEN", raising=False)
    with pytest.raises(corral.CorralError, match="CORRAL_ADDRESS and CORRAL_TOKEN"):
        corral.Teammate.connect()
    with pytest.raises(corral.CorralError, match="CORRAL_TOKEN"):
        corral.Teammate.connect("unix:/x.sock")


class FakeClaim:
    def __init__(self, info: ClaimInfo) -> None:
        self.info = info
        self.refreshed: list[ClaimInfo] = []

    def _refresh(self, info: ClaimInfo) -> None:
        self.refreshed.append(info)


def claim_info(token: str, task_id: str = "t") -> ClaimInfo:
    return ClaimInfo(Task(task_id, TaskState.IN_PROGRESS), token=token, lease_expire_time=None, attempt=1, fence=1)


def test_claim_book_hands_out_each_token_once() -> None:
    book: ClaimBook[FakeClaim] = ClaimBook(remember_finished=2)
    first = book.admit(claim_info("a"), FakeClaim)
    assert first is not None
    resent = claim_info("a")
    assert book.admit(resent, FakeClaim) is None
    assert first.refreshed == [resent]
    assert book.held() == [first]

    book.forget("a")
    assert book.held() == []
    assert book.admit(claim_info("a"), FakeClaim) is None, "a re-send racing a completion is still a duplicate"

    for token in ("b", "c", "d"):
        assert book.admit(claim_info(token), FakeClaim) is not None
        book.forget(token)
    assert book.admit(claim_info("a"), FakeClaim) is not None, "finished tokens are remembered boundedly"


def test_claim_book_knows_a_claim_it_let_go_of_so_its_end_notice_is_still_passed_on() -> None:
    """A renewal that proves a claim dead forgets its token; the stream's claim_ended
    for it, which may come just after, is still for a claim this client held."""
    book: ClaimBook[FakeClaim] = ClaimBook(remember_finished=2)
    book.admit(claim_info("a"), FakeClaim)
    assert not book.recently_held("a"), "held, not let go of"
    book.forget("a")
    assert book.get("a") is None and book.recently_held("a")
    assert not book.recently_held("never-held")


def test_handler_results_encode_to_bytes() -> None:
    assert encode_result(None) == b""
    assert encode_result("héllo") == "héllo".encode()
    assert encode_result(b"\x00\x01") == b"\x00\x01"
    assert encode_result(bytearray(b"ab")) == b"ab"
    with pytest.raises(corral.PermanentFailure, match="int"):
        encode_result(42)


def test_failures_are_stored_as_their_message_without_a_traceback() -> None:
    try:
        raise corral.PermanentFailure("upstream returned 500")
    except corral.PermanentFailure as exc:  # raised, so it carries a traceback
        assert describe_failure(exc) == "upstream returned 500"
    try:
        raise ValueError("bad row 7")
    except ValueError as exc:
        assert describe_failure(exc) == "ValueError: bad row 7"
    assert describe_failure(KeyError()) == "KeyError"
    assert describe_failure(corral.PermanentFailure()) == "PermanentFailure"
    long = describe_failure(ValueError("x" * (MAX_ERROR_CHARS * 2)))
    assert len(long) == MAX_ERROR_CHARS and long.startswith("ValueError: xxx") and long.endswith("…")
    assert is_retryable(ValueError()) and not is_retryable(corral.PermanentFailure())


def test_tally_and_options() -> None:
    tally = Tally()
    tally.add(completed=2)
    tally.add(failed=1, lost=1)
    summary = tally.summary(ExitReason.SHUTDOWN, plan_id="p")
    assert (summary.completed, summary.failed, summary.lost, summary.exit_reason) == (2, 1, 1, ExitReason.SHUTDOWN)
    with pytest.raises(ValueError):
        RunOptions(slots=0)


def test_only_transient_errors_are_retried() -> None:
    assert is_transient(corral.Unavailable("down"))
    assert is_transient(corral.Overloaded("busy"))
    assert is_transient(corral.CorralError("slow", code=grpc.StatusCode.DEADLINE_EXCEEDED))
    assert not is_transient(corral.LeaseExpired("late", code=grpc.StatusCode.FAILED_PRECONDITION))
    assert not is_transient(corral.Unauthenticated("who"))
    assert not is_transient(ValueError())


def _state(attempt: int, outcome_time: float, exc: BaseException) -> tenacity.RetryCallState:
    state = tenacity.RetryCallState(tenacity.Retrying(), fn=None, args=(), kwargs={})
    state.attempt_number = attempt
    state.set_exception((type(exc), exc, None))
    state.outcome_timestamp = outcome_time
    return state


def test_outage_budget_starts_at_the_first_failure() -> None:
    stop = _StopAfterOutage(10)
    # The first attempt ran for an hour (a healthy stream) before failing.
    assert not stop(_state(1, 3600.0, corral.Unavailable("down")))
    assert not stop(_state(2, 3609.0, corral.Unavailable("down")))
    assert stop(_state(3, 3610.5, corral.Unavailable("down")))


def test_wait_honours_the_daemons_retry_hint() -> None:
    hinted = corral.Overloaded("busy", retry_after=datetime.timedelta(milliseconds=750))
    assert _wait(_state(1, time.monotonic(), hinted)) == 0.75
    backoff = _wait(_state(1, time.monotonic(), corral.Unavailable("down")))
    assert 0 <= backoff <= 5
