"""Every event a store function notes has a line in the activity log: a note without one
made the log writer raise after its commit, losing the rest of that batch's lines."""

from __future__ import annotations

import logging
import pathlib
import re

import pytest

from corrald import activity

SERVER = pathlib.Path(activity.__file__).resolve().parent
NOTE = re.compile(r'\bnote\(\s*"([a-z_]+)"((?:[^()]|\([^()]*\))*)\)', re.S)


def _notes() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in SERVER.rglob("*.py"):
        for event, arguments in NOTE.findall(path.read_text()):
            found.setdefault(event, set()).update(re.findall(r"\b([a-z_]+)=", arguments))
    return found


@pytest.mark.timeout(30)
def test_every_noted_event_has_a_line_that_its_fields_fill(caplog: pytest.LogCaptureFixture) -> None:
    notes = _notes()
    assert {"claimed", "budget_set", "budget_exhausted"} <= notes.keys()
    caplog.set_level(logging.INFO, logger="corrald.activity")
    for event, fields in sorted(notes.items()):
        activity.write([(event, dict.fromkeys(fields, "x"))])  # raises KeyError for a missing line or field
    assert len(caplog.records) == len(notes)
