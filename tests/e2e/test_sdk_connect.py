"""A wrong address is said, not waited on in silence: the first failed connection logs
one warning naming the address and the retry budget, and once the budget is spent
`run_teammate`, `Lead.connect` and `Teammate.connect` raise Unavailable naming it."""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import corral
import corral.aio

BUDGET = 1.5


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "corral.connect" and r.levelno == logging.WARNING]


def _attempts(address: str) -> dict[str, Callable[[], object]]:
    def aio(make: Callable[[], object]) -> Callable[[], object]:
        return lambda: asyncio.run(make())  # type: ignore[arg-type]

    async def aio_teammate_run() -> object:
        return await corral.aio.run_teammate(lambda task: b"", address=address, token="t", reconnect_timeout=BUDGET)

    return {
        "run_teammate": lambda: corral.run_teammate(
            lambda task: b"", address=address, token="t", reconnect_timeout=BUDGET
        ),
        "aio.run_teammate": aio(aio_teammate_run),
        "Lead.connect": lambda: corral.Lead.connect(address, "t", connect_timeout=BUDGET),
        "aio.Lead.connect": aio(lambda: corral.aio.Lead.connect(address, "t", connect_timeout=BUDGET)),
        "Teammate.connect": lambda: corral.Teammate.connect(address, "t", connect_timeout=BUDGET),
        "aio.Teammate.connect": aio(lambda: corral.aio.Teammate.connect(address, "t", connect_timeout=BUDGET)),
    }


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", list(_attempts("")))
def test_a_wrong_address_warns_once_then_raises_unavailable_naming_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    caplog.set_level(logging.WARNING, logger="corral")
    address = f"unix:{tmp_path}/nope.sock"
    started = time.monotonic()
    with pytest.raises(corral.Unavailable) as raised:
        _attempts(address)[how]()
    took = time.monotonic() - started
    assert BUDGET <= took < BUDGET + 10, took
    assert re.match(rf"cannot reach corrald at {re.escape(address)}: gave up after 1.5 s", raised.value.details)
    assert _warnings(caplog) == [f"cannot reach corrald at {address}: retrying for 1.5 s"]


class _Heard(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.event = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.name == "corral.connect":
            self.event.set()


@pytest.mark.timeout(60)
def test_connect_waits_for_a_daemon_that_starts_within_the_budget(tmp_path: Path) -> None:
    state = tmp_path / "state"
    address = f"unix:{state}/corral.sock"
    heard = _Heard()
    logging.getLogger("corral.connect").addHandler(heard)
    outcome: list[object] = []

    def connect() -> None:
        try:
            outcome.append(corral.Teammate.connect(address, "t", connect_timeout=45))
        except corral.CorralError as exc:
            outcome.append(exc)

    connecting = threading.Thread(target=connect, daemon=True)
    connecting.start()
    try:
        assert heard.event.wait(30)  # it failed once and is retrying
        with corral.Lead.launch(state, ready_timeout=30) as lead:
            assert lead.address == address
            connecting.join(30)
            assert not connecting.is_alive()
            (teammate,) = outcome
            assert isinstance(teammate, corral.Teammate)
            teammate.close()
    finally:
        logging.getLogger("corral.connect").removeHandler(heard)
