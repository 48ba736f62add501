"""ListTeammates in pages: every reply within a default client's 4 MiB, however big the team."""

from __future__ import annotations

import grpc
import pytest

import corral
from corral.v1 import corral_pb2 as pb

from .wire import assert_status, rpc_error


@pytest.mark.timeout(30)
def test_pages_of_teammates_come_in_the_order_they_were_added(daemon):
    names = [f"m{i}" for i in range(5)]
    for name in names:
        daemon.add_teammate(name)
    seen, token, pages = [], "", 0
    while True:
        page = daemon.lead.board.ListTeammates(pb.ListTeammatesRequest(page_size=2, page_token=token))
        seen += [t.name for t in page.teammates]
        pages += 1
        token = page.next_page_token
        if not token:
            break
    assert (seen, pages) == (names, 3)
    whole = daemon.lead.board.ListTeammates(pb.ListTeammatesRequest())
    assert [t.name for t in whole.teammates] == names and not whole.next_page_token


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("request_fields", "field"),
    [({"page_size": -1}, "page_size"), ({"page_size": 1001}, "page_size"), ({"page_token": "nope"}, "page_token")],
)
def test_a_bad_page_request_is_refused_by_field(daemon, request_fields, field):
    error = rpc_error(daemon.lead.board.ListTeammates, pb.ListTeammatesRequest(**request_fields))
    assert_status(error, grpc.StatusCode.INVALID_ARGUMENT, field=field)


@pytest.mark.timeout(60)
def test_a_team_too_big_for_one_reply_comes_in_pages_and_the_sdk_reads_them_all(daemon):
    # 300 teammates with 32 roles of 128 four-byte characters: about 4.9 MB in one reply.
    roles = [f"{r:02d}".ljust(128, "\U0001f600") for r in range(32)]
    names = [f"big{i:03d}" for i in range(300)]
    for name in names:
        daemon.add_teammate(name, roles=roles)
    first = daemon.lead.board.ListTeammates(pb.ListTeammatesRequest())  # a default-settings channel
    assert first.next_page_token and first.ByteSize() < 3 * 1024 * 1024 + 64
    with corral.Lead.connect(daemon.address, daemon.lead_token) as lead:
        listed = lead.list_teammates()
    assert [t.name for t in listed] == names and all(list(t.roles) == roles for t in listed)
