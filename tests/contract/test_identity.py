"""GetIdentity: who a credential is, taken from the credential alone (design §1, §2.8)."""

from __future__ import annotations

import grpc
import pytest

from corral.v1 import corral_pb2 as pb

from .wire import assert_status, module_daemon, rpc_error


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    with module_daemon(tmp_path_factory, "identity") as running:
        yield running


@pytest.mark.timeout(30)
def test_the_lead_is_lead_with_no_task_roles(shared):
    answer = shared.lead.board.GetIdentity(pb.GetIdentityRequest())
    assert (answer.identity, answer.role, list(answer.roles)) == ("lead", "lead", [])


@pytest.mark.timeout(30)
def test_a_teammate_gets_its_name_role_and_task_roles(shared):
    mate = shared.add_teammate("ida", roles=["gpu", "review"])
    answer = mate.board.GetIdentity(pb.GetIdentityRequest())
    assert (answer.identity, answer.role, list(answer.roles)) == ("ida", "teammate", ["gpu", "review"])


@pytest.mark.timeout(30)
def test_a_revoked_or_unknown_credential_is_unauthenticated(shared):
    mate = shared.add_teammate("gone")
    assert mate.board.GetIdentity(pb.GetIdentityRequest()).identity == "gone"
    shared.lead.lead.RemoveTeammate(pb.RemoveTeammateRequest(name="gone"))
    assert_status(rpc_error(mate.board.GetIdentity, pb.GetIdentityRequest()), grpc.StatusCode.UNAUTHENTICATED)
    stranger = shared.client("not-a-token", "stranger")
    assert_status(rpc_error(stranger.board.GetIdentity, pb.GetIdentityRequest()), grpc.StatusCode.UNAUTHENTICATED)


@pytest.mark.timeout(30)
def test_a_viewer_gets_its_name_and_the_viewer_role_until_removed(shared):
    token = shared.lead.lead.AddViewer(pb.AddViewerRequest(name="eve")).token
    viewer = shared.client(token, "eve")
    answer = viewer.board.GetIdentity(pb.GetIdentityRequest())
    assert (answer.identity, answer.role, list(answer.roles)) == ("eve", "viewer", [])
    shared.lead.lead.RemoveViewer(pb.RemoveViewerRequest(name="eve"))
    assert_status(rpc_error(viewer.board.GetIdentity, pb.GetIdentityRequest()), grpc.StatusCode.UNAUTHENTICATED)
