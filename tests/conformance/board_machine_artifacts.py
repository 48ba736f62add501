"""The board state machine's artifact rule (test_board_state_machine.py mixes it in):
an attach succeeds only from a live claim, and every task shows the latest artifact
of each name the model was given."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule

from corrald.store.tasks.artifact_refs import current_of_tasks

NAMES = ("log", "out/report.txt")
CONTENTS = (b"", b"a", b"bb")  # few, so contents repeat across tasks and attempts


class ArtifactRules:
    """Needs the machine's `model`, `board`, `now`, `pick_call` and `dump_but_clock`."""

    model: Any
    board: Any
    now: int
    pick_call: Any
    dump_but_clock: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # What each task should show: its latest artifact of each name, (sha256, attempt).
        self.artifacts: dict[str, dict[str, tuple[str, int]]] = {}

    @precondition(lambda self: self.model.tasks)
    @rule(data=st.data(), name=st.sampled_from(NAMES), content=st.sampled_from(CONTENTS))
    def attach(self, data, name: str, content: bytes) -> None:
        """An upload attached by mostly a live claim's holder; a dead or wrong claim's is
        refused and writes nothing (its stored bytes are named by no row)."""
        live = sorted(
            (t for t in self.model.tasks.values() if t.token is not None and t.lease_end > self.now),
            key=lambda t: t.order,
        )
        if live and data.draw(st.integers(0, 3), label="a live claim's holder"):  # rare at random
            task = data.draw(st.sampled_from(live), label="attacher")
            who, task_id, token = task.owner, task.id, task.token
        else:
            who, task_id, token = self.pick_call(data)
        expected = self.model.expected_error("attach", who, task_id, token, self.now)
        if expected is not None:
            before = self.dump_but_board_blobs()
            with pytest.raises(expected):
                self.board.attach(who, task_id, token, name, content)
            assert self.dump_but_board_blobs() == before
            return
        record = self.board.attach(who, task_id, token, name, content)
        attempt = self.model.claims[token].attempt
        assert (record.name, record.sha256, record.attempt) == (name, hashlib.sha256(content).hexdigest(), attempt)
        self.artifacts.setdefault(task_id, {})[name] = (record.sha256, attempt)

    def dump_but_board_blobs(self) -> list[str]:
        """The database less the clock stamp and, on PostgreSQL, the blob store's rows (a
        refused upload's bytes stay stored, named by nothing, until a restart)."""
        dump = self.dump_but_clock()
        return [line for line in dump if "'artifact_uploads'" not in line and "'artifact_chunks'" not in line]

    @invariant()
    def tasks_show_the_latest_artifact_of_each_name(self) -> None:
        def shown(tx) -> dict[str, list[tuple[str, str, int]]]:
            ids = dict(tx.conn.execute("SELECT seq, id FROM tasks").fetchall())
            found = current_of_tasks(tx.conn, ids)
            return {ids[seq]: [(r.name, r.sha256, r.attempt) for r in records] for seq, records in found.items()}

        assert self.board.call(shown) == {
            task_id: [(name, *named[name]) for name in sorted(named)] for task_id, named in self.artifacts.items()
        }
