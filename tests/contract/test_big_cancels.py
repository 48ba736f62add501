"""CancelTasks at scale: one set-based job, and a reply within a default client's 4 MiB."""

from __future__ import annotations

import grpc
import pytest

from corral.v1 import corral_pb2 as pb

from .wire import assert_status, rpc_error

KIB = 1024


@pytest.mark.timeout(60)
def test_canceling_a_root_answers_why_for_each_dependent_without_echoing_their_specs(daemon):
    # 100 dependents with 64 KiB descriptions: an echo of their specs would be 6.4 MB.
    batch = [pb.TaskSpec(id="root", title="root")] + [
        pb.TaskSpec(id=f"dep{i}", title="d", description="d" * (64 * KIB), depends_on=["root"]) for i in range(100)
    ]
    for start in range(0, len(batch), 51):  # in two requests: one message holds at most 6 MiB
        daemon.create_tasks(*batch[start : start + 51])
    reply = daemon.lead.lead.CancelTasks(pb.CancelTasksRequest(ids=["root"]))  # a default-settings channel
    assert [t.id for t in reply.tasks] == ["root"] + [f"dep{i}" for i in range(100)]
    assert {t.state for t in reply.tasks} == {pb.TASK_STATE_CANCELED} and reply.omitted_count == 0
    assert reply.tasks[0].error == "canceled by the lead"
    assert all(t.error == "dependency 'root' was canceled" and t.HasField("finish_time") for t in reply.tasks[1:])
    assert all(not t.description for t in reply.tasks)
    assert daemon.get_task("dep99").state == pb.TASK_STATE_CANCELED


@pytest.mark.timeout(60)
def test_a_cascade_too_big_for_one_reply_is_counted_not_cut_silently(daemon):
    # 4,000 ids of 128 four-byte characters in a chain: each canceled task costs
    # about 1 KiB in the reply (its id, and the id of the dependency that took it).
    ids = [f"{i:05d}".ljust(128, "\U0001f600") for i in range(4_000)]
    chain = [pb.TaskSpec(id=task_id, title="c", depends_on=ids[i - 1 : i]) for i, task_id in enumerate(ids)]
    for start in range(0, len(chain), 2_000):  # 2 MiB of ids per batch at most
        daemon.create_tasks(*chain[start : start + 2_000])
    reply = daemon.lead.lead.CancelTasks(pb.CancelTasksRequest(ids=[ids[0]]))
    assert reply.ByteSize() < 3 * KIB * KIB + 64
    assert reply.omitted_count > 0 and len(reply.tasks) + reply.omitted_count == len(ids)
    assert [t.id for t in reply.tasks] == ids[: len(reply.tasks)]
    canceled = daemon.lead.board.ListTasks(pb.ListTasksRequest(states=[pb.TASK_STATE_CANCELED], page_size=1000))
    assert len(canceled.tasks) == 1000 and canceled.next_page_token  # every one of them is canceled


@pytest.mark.timeout(30)
def test_more_ids_than_a_batch_is_refused_and_cancels_nothing(daemon):
    daemon.create_tasks(pb.TaskSpec(id="kept", title="k"))
    error = rpc_error(
        daemon.lead.lead.CancelTasks, pb.CancelTasksRequest(ids=["kept"] + [f"x{i}" for i in range(10_000)])
    )
    assert_status(error, grpc.StatusCode.INVALID_ARGUMENT, field="ids")
    assert daemon.get_task("kept").state == pb.TASK_STATE_PENDING
