"""A daemon shedding load, for real: a tool call the daemon refuses with OVERLOADED
comes back as an isError that names the refusal and says when to retry."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import corral

from .mcpkit import Secrets, bridge_agent

HOLD_MS = 1000  # each of the holder's writes keeps the teammate's one place this long


@pytest.mark.timeout(60)
def test_a_call_refused_for_load_is_an_error_that_says_when_to_retry(tmp_path) -> None:
    # One write at a time per caller and none waiting, so while another client of the
    # same teammate holds that place (its writer jobs sleep), the bridge's write is refused.
    with corral.Lead.launch(
        tmp_path / "state",
        extra_args=["--calls-per-identity", "1", "--waiting-per-identity", "0"],
        env={"CORRAL_FAILPOINTS": f"job:crowded=sleep:{HOLD_MS}"},
    ) as lead:
        token = lead.add_teammate("crowded").token
        stop_holding = threading.Event()
        holding = threading.Thread(target=_hold_the_place, args=(lead.address, token, stop_holding), daemon=True)
        holding.start()

        async def scenario() -> list[str]:
            refusals: list[str] = []
            async with bridge_agent(lead.address, token, Secrets({lead.token, token})) as agent:
                deadline = time.monotonic() + 20
                while not refusals and time.monotonic() < deadline:
                    result = await agent.call("send_message", to="lead", body="sent while the place is held")
                    if result.is_error:
                        refusals.append(result.text)
            return refusals

        try:
            refusals = asyncio.run(scenario())
        finally:
            stop_holding.set()
            holding.join(timeout=10)
    assert refusals, "no call of the bridge was refused while another client held the teammate's one place"
    assert refusals[0].startswith("OVERLOADED: retry after "), refusals[0]
    assert "nothing was done" in refusals[0]


def _hold_the_place(address: str, token: str, stop: threading.Event, attempts: int = 1000) -> None:
    """Writes one after another (each a slow writer job) until told to stop, at most
    `attempts` times; its own refusals, when the bridge's call got the place first, are
    part of the race."""
    with corral.Teammate.connect(address, token) as holder:
        for _ in range(attempts):
            if stop.is_set():
                return
            try:
                holder.send_message("lead", "holding")
            except corral.Overloaded:
                continue
