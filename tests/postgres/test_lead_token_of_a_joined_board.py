"""The CLI on the state directory of a daemon that joined a PostgreSQL board another
daemon created: it says where the lead token is, never to start the running daemon."""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

from corral.cli import main

pytestmark = pytest.mark.timeout(60)


def test_a_joined_daemons_state_dir_says_where_the_lead_token_is(shared_board):
    creator, joiner = shared_board.daemon("a"), shared_board.daemon("b")
    board_id = (joiner.state_dir / "board.id").read_text().strip()
    assert not (joiner.state_dir / "lead.token").exists()

    result = CliRunner().invoke(main, ["--state-dir", str(joiner.state_dir), "tasks", "list"])
    assert result.exit_code == 2
    message = result.output.strip()
    assert message.startswith(f"corral: no lead token at {joiner.state_dir / 'lead.token'}: ")
    assert f"joined PostgreSQL board {board_id}, which another daemon created" in message
    assert "corral serve" not in message and "start" not in message

    # Its lead.token copied in, the joined daemon's state directory serves the Lead.
    shutil.copy(creator.state_dir / "lead.token", joiner.state_dir / "lead.token")
    result = CliRunner().invoke(main, ["--state-dir", str(joiner.state_dir), "tasks", "list"])
    assert result.exit_code == 0, result.output
