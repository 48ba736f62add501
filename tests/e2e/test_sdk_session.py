"""The SDK on the Session stream against the real daemon: claim calls and acks
travel as ops, a failed op raises what the unary call raises, and an answer
that never arrives (lost by a proxy between teammate and daemon) is asked
for again under the same op id, which the daemon does not run twice."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

import corral
import corral._session
import corral.aio
from corral._retry import is_transient
from corral._transport import TRANSPORT_ENV
from tests.support import FAST_POLL, Daemon, TeammateThread
from tests.support.proxy import SESSION_METHOD, SessionProxy

pytestmark = pytest.mark.timeout(60)

UNARY = "/corral.v1.TeammateService/{}"
# A late answer is noticed after this long (the client's rpc_timeout).
OP_TIMEOUT = 1.0
# Idle budget of the streams that wait out a late answer: well past OP_TIMEOUT.
PATIENT = {"poll_interval": FAST_POLL, "max_idle_polls": 200}


@pytest.fixture(autouse=True)
def session_transport(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TRANSPORT_ENV, "session")


@pytest.fixture
def proxy(lead: corral.Lead, tmp_path: Path) -> Iterator[SessionProxy]:
    with SessionProxy(lead.address, tmp_path / "proxy.sock") as proxy:
        yield proxy


def test_claim_calls_and_acks_travel_on_the_session(lead: corral.Lead, proxy: SessionProxy) -> None:
    lead.create_tasks([corral.TaskSpec("a"), corral.TaskSpec("b")])
    new = lead.add_teammate("ann")
    lead.send_message("ann", "hello")
    received: list[str] = []
    summary = corral.run_teammate(
        lambda task: f"did {task.id}",
        address=proxy.address,
        token=new.token,
        poll_interval=FAST_POLL,
        max_idle_polls=2,
        on_message=lambda message: received.append(message.body),
    )
    assert summary.exit_reason is corral.ExitReason.IDLE_TIMEOUT and summary.completed == 2
    assert received == ["hello"]
    assert [len(ids) for ids in proxy.session_ops("complete")] == [2]
    assert [len(ids) for ids in proxy.session_ops("ack")] == [1]
    unary = {UNARY.format(name) for name in ("CompleteTask", "AckMessages", "RenewLease", "Idle")}
    assert unary.isdisjoint(proxy.calls), proxy.calls
    assert lead.get_task("b").result == b"did b"


def test_idle_transport_opens_no_session(
    lead: corral.Lead, proxy: SessionProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TRANSPORT_ENV, "idle")
    lead.create_tasks([corral.TaskSpec("a")])
    new = lead.add_teammate("ann")
    summary = corral.run_teammate(
        lambda task: b"ok", address=proxy.address, token=new.token, poll_interval=FAST_POLL, max_idle_polls=2
    )
    assert summary.completed == 1
    assert SESSION_METHOD not in proxy.calls
    assert UNARY.format("Idle") in proxy.calls and UNARY.format("CompleteTask") in proxy.calls


def test_a_failed_op_raises_what_the_unary_call_raises(lead: corral.Lead, proxy: SessionProxy) -> None:
    lead.create_tasks([corral.TaskSpec("mine")])
    ann_new, bob_new = lead.add_teammate("ann"), lead.add_teammate("bob")
    with corral.Teammate.connect(lead.address, ann_new.token) as ann:
        ann_events = ann.idle(poll_interval=FAST_POLL)
        claim = next(ann_events)
        assert isinstance(claim, corral.Claim)
        lead.send_message("bob", "hello")
        with corral.Teammate.connect(proxy.address, bob_new.token) as bob:
            bob_events = bob.idle(poll_interval=FAST_POLL)
            assert isinstance(next(bob_events), corral.Message)  # bob's Session stream is open
            # Bob uses ann's claim: on the stream, then (stream closed) by unary call.
            with pytest.raises(corral.CorralError) as complete_op:
                bob._claim_calls.complete("mine", claim.token, b"not mine")
            with pytest.raises(corral.CorralError) as renew_op:
                bob._claim_calls.renew("mine", claim.token, timeout=5)
            bob_events.close()
            with pytest.raises(corral.CorralError) as complete_call:
                bob._claim_calls.complete("mine", claim.token, b"not mine")
        assert [len(ids) for ids in proxy.session_ops("complete")] == [1]
        assert [len(ids) for ids in proxy.session_ops("renew")] == [1]
        assert proxy.calls.count(UNARY.format("CompleteTask")) == 1
        for raised in (complete_op, renew_op, complete_call):
            assert type(raised.value) is corral.ClaimTokenMismatch, raised.value
            assert raised.value.reason == "CLAIM_TOKEN_MISMATCH"
        # Ann's claim came through untouched, and completes on her stream.
        assert claim.complete(b"mine").result == b"mine"
        ann_events.close()


def test_a_late_answer_replaces_the_stream_and_resends_the_op_under_its_id(
    lead: corral.Lead, proxy: SessionProxy
) -> None:
    lead.create_tasks([corral.TaskSpec("a")])
    new = lead.add_teammate("ann")
    with corral.Teammate.connect(proxy.address, new.token, rpc_timeout=OP_TIMEOUT) as ann:
        events = ann.idle(**PATIENT)
        claim = next(events)
        assert isinstance(claim, corral.Claim)
        lead.send_message("ann", "while you work")
        message = next(events)  # acknowledged only when the loop resumes
        assert isinstance(message, corral.Message)

        lost = proxy.lose_answer("release")
        task = claim.release()  # the daemon released it; the answer never came
        # Had the release gone again under a new op id, the daemon would have
        # refused it (the claim had ended). A repeat answers with the task as
        # it is now: by then the new stream may have handed it out again.
        assert lost.is_set() and task.id == "a"

        again = next(events)
        assert isinstance(again, corral.Claim), again
        assert again.task.id == "a" and again.token != claim.token and again.attempt == claim.attempt
        again.complete(b"done")
        lead.send_message("ann", "next")
        # The new stream sent the first message again (unacknowledged then): not yielded twice.
        after = next(events)
        assert isinstance(after, corral.Message) and after.body == "next", after
        events.close()
    first, second = proxy.session_ops("release")[:2]
    assert len(first) == 1 and first == second, proxy.sessions
    assert "message" in proxy.sessions[1].events, "the replacing stream re-sent the inbox"
    assert lead.get_task("a").result == b"done"


def test_an_op_unanswered_on_two_streams_in_a_row_raises_deadline_exceeded(
    lead: corral.Lead, proxy: SessionProxy
) -> None:
    lead.create_tasks([corral.TaskSpec("a")])
    new = lead.add_teammate("ann")
    with corral.Teammate.connect(proxy.address, new.token, rpc_timeout=OP_TIMEOUT) as ann:
        events = ann.idle(**PATIENT)
        claim = next(events)
        assert isinstance(claim, corral.Claim)
        first, second = proxy.lose_answer("release"), proxy.lose_answer("release")
        with pytest.raises(corral.CorralError) as raised:
            claim.release()
        assert first.is_set() and second.is_set()
        assert raised.value.code is grpc.StatusCode.DEADLINE_EXCEEDED and is_transient(raised.value)
        again = next(events)  # the release ran once; the task came back on the stream
        assert isinstance(again, corral.Claim) and again.task.id == "a" and again.token != claim.token
        assert again.complete(b"done").state is corral.TaskState.COMPLETED
        events.close()
    releases = [ids for ids in proxy.session_ops("release") if ids]
    assert len(releases) == 2 and releases[0] == releases[1], proxy.sessions


def test_a_late_answer_on_asyncio_too(lead: corral.Lead, proxy: SessionProxy) -> None:
    lead.create_tasks([corral.TaskSpec("a")])
    new = lead.add_teammate("ann")

    async def scenario() -> corral.Task:
        async with await corral.aio.Teammate.connect(proxy.address, new.token, rpc_timeout=OP_TIMEOUT) as ann:
            async with contextlib.aclosing(ann.idle(**PATIENT)) as events:
                claim = await anext(events)
                assert isinstance(claim, corral.aio.Claim)
                lost = proxy.lose_answer("fail")
                task = await claim.fail("broken input", retryable=False)
                assert lost.is_set()
                return task

    task = asyncio.run(scenario())
    # A fail sent again under a new id would have been refused: the claim had ended.
    assert task.state is corral.TaskState.FAILED and task.error == "broken input" and task.attempt == 1
    first, second = proxy.session_ops("fail")[:2]
    assert len(first) == 1 and first == second, proxy.sessions


def permanently_failing(task: corral.Task) -> bytes:
    raise corral.PermanentFailure("no good")


def test_a_stream_broken_before_the_answer_sends_the_op_again_on_the_next(
    lead: corral.Lead, proxy: SessionProxy
) -> None:
    lead.create_tasks([corral.TaskSpec("doomed", max_attempts=1)])
    new = lead.add_teammate("ann")
    broken = proxy.lose_answer("fail", then_break=True)
    summary = corral.run_teammate(
        permanently_failing, address=proxy.address, token=new.token, poll_interval=FAST_POLL, max_idle_polls=3
    )
    assert broken.is_set()
    # A fail sent again under a new id would have been refused (the claim had
    # ended) and the outcome counted as lost.
    assert (summary.completed, summary.failed, summary.lost) == (0, 1, 0)
    first, second = [ids for ids in proxy.session_ops("fail") if ids][:2]
    assert len(first) == 1 and first == second, proxy.sessions
    task = lead.get_task("doomed")
    assert task.state is corral.TaskState.FAILED and task.error == "no good" and task.attempt == 1


def test_a_broken_stream_on_asyncio_too(lead: corral.Lead, proxy: SessionProxy) -> None:
    lead.create_tasks([corral.TaskSpec("doomed", max_attempts=1)])
    new = lead.add_teammate("ann")
    broken = proxy.lose_answer("fail", then_break=True)

    async def handler(task: corral.Task) -> bytes:
        raise corral.PermanentFailure("no good")

    summary = asyncio.run(
        corral.aio.run_teammate(
            handler, address=proxy.address, token=new.token, poll_interval=FAST_POLL, max_idle_polls=3
        )
    )
    assert broken.is_set()
    assert (summary.completed, summary.failed, summary.lost) == (0, 1, 0)
    first, second = [ids for ids in proxy.session_ops("fail") if ids][:2]
    assert len(first) == 1 and first == second, proxy.sessions


def test_an_op_the_daemon_committed_before_it_died_is_answered_after_the_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # However slowly the daemon comes back on a loaded machine, the op waits for it.
    monkeypatch.setattr(corral._session, "RESEND_WINDOW", 30.0)
    daemon = Daemon(tmp_path / "state").start(failpoints="before_op_result=kill:1")
    try:
        with corral.Lead.connect(daemon.address, daemon.read_lead_token()) as lead:
            lead.create_tasks([corral.TaskSpec("doomed", max_attempts=1)])
            mate = TeammateThread(lead, "ann", permanently_failing, max_idle_polls=3, reconnect_timeout=30).start()
            # The fail committed; the daemon killed itself before answering it.
            assert daemon.wait_exit(15) == -signal.SIGKILL
        daemon.start()
        summary = mate.result(timeout=40)
        # Sent again under its op id, the fail was answered from the record.
        assert (summary.completed, summary.failed, summary.lost) == (0, 1, 0)
        with corral.Lead.connect(daemon.address, daemon.read_lead_token()) as lead:
            task = lead.get_task("doomed")
        assert task.state is corral.TaskState.FAILED and task.error == "no good" and task.attempt == 1
    finally:
        daemon.stop()
