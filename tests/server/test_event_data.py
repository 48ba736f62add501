"""The event log's data is the JSON of what was emitted, whichever way it is written."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corrald.store import events
from corrald.store.sqlite.storage import open_writer
from corrald.txn import Txn

SCALARS = st.one_of(st.text(), st.integers(min_value=-(2**63), max_value=2**63 - 1), st.none())
# SQLite writes simple events with json_object; PostgreSQL always takes json.dumps' path.
pytestmark = pytest.mark.timeout(30)

VALUES = st.one_of(SCALARS, st.booleans(), st.lists(SCALARS, max_size=3), st.dictionaries(st.text(max_size=5), SCALARS))


@pytest.fixture
def conn(db_path):
    connection = open_writer(db_path, synchronous="OFF", busy_timeout_ms=1000)
    yield connection
    connection.close()


def _round_trip(conn, data: dict) -> dict:
    conn.execute("BEGIN IMMEDIATE")
    events.emit(Txn(conn, 1_000), "probe", data)
    conn.execute("COMMIT")
    (latest,) = events.read_events(conn, conn.execute("SELECT max(seq) - 1 FROM events").fetchone()[0], 1)
    return latest.data


@pytest.mark.timeout(60)
# One connection for every example: each example appends one event and reads back that one.
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.dictionaries(st.text(max_size=12), VALUES, max_size=6))
def test_emitted_data_reads_back_as_it_was_given(conn, data):
    assert _round_trip(conn, data) == data


@pytest.mark.timeout(10)
def test_booleans_stay_booleans_and_text_stays_text(conn):
    data = {"approve": True, "final": False, "name": '"quoted" \\ \n\u202e', "n": 2**62, "none": None}
    back = _round_trip(conn, data)
    assert back == data and back["approve"] is True and back["final"] is False
