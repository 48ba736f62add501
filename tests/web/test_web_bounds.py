"""The web board's bounds per identity, over real HTTP against a real daemon: no viewer,
nor all of them, nor any local process's bad logins can keep the lead off its board.
Sessions are bounded per identity (a login past its bound ends that identity's oldest),
failed logins are throttled without refusing a good credential, and event streams are
bounded per viewer with a share kept for the lead."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator

import aiohttp
import pytest

from corrald.credentials import Identity
from corrald.web.config import (
    FEED_CLIENTS_MAX,
    FEED_LEAD_RESERVED,
    FEED_PER_VIEWER,
    SESSIONS_LEAD_MAX,
    SESSIONS_MAX,
    SESSIONS_PER_VIEWER,
)
from corrald.web.sessions import Sessions
from tests.support.clocks import SecondsClock
from tests.web.board_support import WebDaemon, run, start_web_daemon, stop_web_daemon

pytestmark = pytest.mark.timeout(90)

LEAD = Identity("lead", True)


def viewer(name: str) -> Identity:
    return Identity(f"viewer:{name}", False, is_viewer=True)


@pytest.fixture
def daemon(tmp_path: pathlib.Path) -> Iterator[WebDaemon]:
    started = start_web_daemon(tmp_path / "state")
    try:
        yield started
    finally:
        stop_web_daemon(started)


async def log_in(http: aiohttp.ClientSession, daemon: WebDaemon, sent: dict[str, str]) -> tuple[int, str, str]:
    """(status, the new session's cookie or "", the error) of one login; the jar keeps nothing."""
    async with http.post(f"{daemon.url}/login", json=sent) as response:
        body = await response.json()
        cookie = response.cookies["corral_session"].value if response.status == 200 else ""
    http.cookie_jar.clear()
    return response.status, cookie, body.get("error", "")


async def session_of(http: aiohttp.ClientSession, daemon: WebDaemon, token: str) -> str:
    status, cookie, error = await log_in(http, daemon, {"token": token})
    assert status == 200, error
    return cookie


async def board_status(http: aiohttp.ClientSession, daemon: WebDaemon, cookie: str) -> int:
    async with http.get(f"{daemon.url}/api/board", headers={"Cookie": f"corral_session={cookie}"}) as response:
        return response.status


# ---------------------------------------------------------------- sessions


def test_a_viewer_logging_in_past_every_bound_ends_only_its_own_oldest_sessions(daemon):
    token = daemon.lead.add_viewer("eager")
    logins = SESSIONS_MAX + 6  # past the whole table too, where it once ended the lead's session

    async def body(http):
        lead = await session_of(http, daemon, daemon.token)
        mine = [await session_of(http, daemon, token) for _ in range(logins)]
        assert await board_status(http, daemon, lead) == 200  # the lead's session outlived them all
        kept = mine[-SESSIONS_PER_VIEWER:]
        assert [await board_status(http, daemon, c) for c in kept] == [200] * SESSIONS_PER_VIEWER
        assert await board_status(http, daemon, mine[-SESSIONS_PER_VIEWER - 1]) == 401  # its own oldest went
        assert await board_status(http, daemon, mine[0]) == 401

    run(body)


def test_past_the_sessions_viewers_may_hold_a_viewers_login_gets_503_and_the_leads_does_not(daemon):
    pool = SESSIONS_MAX - SESSIONS_LEAD_MAX
    full = [daemon.lead.add_viewer(f"v{i}") for i in range(pool // SESSIONS_PER_VIEWER)]
    late = daemon.lead.add_viewer("late")

    async def body(http):
        for token in full:
            for _ in range(SESSIONS_PER_VIEWER):
                await session_of(http, daemon, token)
        status, _, error = await log_in(http, daemon, {"token": late})
        assert status == 503 and "viewers" in error, (status, error)
        await session_of(http, daemon, full[0])  # a viewer at its own bound ends its own oldest instead
        leads = [await session_of(http, daemon, daemon.token) for _ in range(3)]
        assert [await board_status(http, daemon, c) for c in leads] == [200] * 3

    run(body)


def test_the_leads_logins_past_its_bound_end_its_own_oldest_session():
    sessions = Sessions(clock=SecondsClock())
    others = [sessions.open(viewer("ann")) for _ in range(3)]
    leads = [sessions.open(LEAD) for _ in range(SESSIONS_LEAD_MAX + 2)]
    assert all(s is not None for s in others + leads)
    found = [sessions.find(s.id) is not None for s in leads if s is not None]
    assert found == [False, False] + [True] * SESSIONS_LEAD_MAX
    assert all(sessions.find(s.id) is not None for s in others if s is not None)


def test_an_expired_session_frees_its_place_in_the_viewers_share():
    clock = SecondsClock()
    sessions = Sessions(clock=clock, ttl_s=60, limit=6, lead_limit=2, per_viewer=2)
    assert all(sessions.open(viewer(name)) is not None for name in ("a", "a", "b", "b"))
    assert sessions.open(viewer("c")) is None  # the viewers' four places are taken
    assert sessions.open(LEAD) is not None and sessions.open(LEAD) is not None  # the lead's two are apart
    clock.now += 61
    assert sessions.open(viewer("c")) is not None


def test_a_kept_table_is_read_back_within_the_bounds(tmp_path):
    path = tmp_path / "web.sessions"
    clock = SecondsClock()
    loose = Sessions(clock=clock, path=path, limit=100, lead_limit=50, per_viewer=50)
    opened = [loose.open(viewer("a")) for _ in range(5)] + [loose.open(LEAD) for _ in range(5)]
    assert all(s is not None for s in opened)
    tight = Sessions(clock=clock, path=path, limit=5, lead_limit=2, per_viewer=3)
    kept = json.loads(path.read_text())
    names = [entry["name"] for entry in kept.values()]
    assert names == ["viewer:a"] * 3 + ["lead"] * 2  # the newest of each
    assert tight.viewer_count == 3


# ---------------------------------------------------------------- failed logins


def test_bad_logins_from_loopback_do_not_stop_the_leads_login(daemon):
    token = daemon.lead.add_viewer("reader")

    async def body(http):
        refused = [await log_in(http, daemon, {"token": f"corral-lead-guess-{i}"}) for i in range(20)]
        assert {status for status, _, _ in refused[:5]} == {401}
        assert {status for status, _, _ in refused[5:]} == {429}  # every later bad one is throttled
        async with http.post(f"{daemon.url}/login", json={"token": "wrong"}) as response:
            assert response.status == 429 and 1 <= int(response.headers["Retry-After"]) <= 60
        # From the same peer (every local process is one), good credentials still log in.
        lead = await session_of(http, daemon, daemon.token)
        assert await board_status(http, daemon, lead) == 200
        assert await board_status(http, daemon, await session_of(http, daemon, token)) == 200
        auth = {"Authorization": f"Bearer {daemon.token}"}
        async with http.post(f"{daemon.url}/login/ticket", headers=auth) as response:
            assert response.status == 200
            ticket = (await response.json())["ticket"]
        status, cookie, error = await log_in(http, daemon, {"ticket": ticket})
        assert status == 200 and await board_status(http, daemon, cookie) == 200, error
        async with http.post(f"{daemon.url}/login/ticket", headers={"Authorization": "Bearer x"}) as response:
            assert response.status == 429

    run(body)


# ---------------------------------------------------------------- event streams


def test_a_viewer_at_its_stream_bound_gets_429_and_viewers_at_theirs_503_and_the_lead_still_streams(daemon):
    viewers_share = FEED_CLIENTS_MAX - FEED_LEAD_RESERVED
    tokens = [daemon.lead.add_viewer(f"w{i}") for i in range(viewers_share // FEED_PER_VIEWER + 1)]

    async def body(http):
        streams: list[aiohttp.ClientResponse] = []

        async def open_stream(cookie: str) -> tuple[int, str]:
            response = await http.get(f"{daemon.url}/api/events", headers={"Cookie": f"corral_session={cookie}"})
            if response.status == 200:
                streams.append(response)
                return 200, ""
            async with response:
                return response.status, (await response.json())["error"]

        try:
            cookies = [await session_of(http, daemon, token) for token in tokens]
            for _ in range(FEED_PER_VIEWER):
                assert (await open_stream(cookies[0]))[0] == 200
            status, error = await open_stream(cookies[0])
            assert status == 429 and f"{FEED_PER_VIEWER} boards" in error, (status, error)
            lead = await session_of(http, daemon, daemon.token)
            assert (await open_stream(lead))[0] == 200  # a viewer at its bound blocks nobody
            for cookie in cookies[1:-1]:
                for _ in range(FEED_PER_VIEWER):
                    assert (await open_stream(cookie))[0] == 200
            status, error = await open_stream(cookies[-1])
            assert status == 503 and "kept for the lead" in error, (status, error)
            for _ in range(FEED_LEAD_RESERVED - 1):  # viewers hold all theirs: the lead's share is whole
                assert (await open_stream(lead))[0] == 200
            assert len(streams) == FEED_CLIENTS_MAX
            status, error = await open_stream(lead)
            assert status == 503 and "too many open boards" in error, (status, error)
        finally:
            for stream in streams:
                stream.close()

    run(body)
