"""The CLI on the state directory of a daemon that joined a PostgreSQL board another
daemon created: it names the host and state directory whose lead.token is the board's,
never to start the running daemon."""

from __future__ import annotations

import shutil
import socket

import pytest
from click.testing import CliRunner

from corral.cli import main

pytestmark = pytest.mark.timeout(60)


def test_a_joined_daemons_state_dir_says_where_the_lead_token_is(shared_board):
    creator, joiner = shared_board.daemon("a"), shared_board.daemon("b")
    board_id = (joiner.state_dir / "board.id").read_text().strip()
    assert not (joiner.state_dir / "lead.token").exists()
    # The board records where its creator runs; the daemon that joined notes it beside board.id.
    assert shared_board.sql("SELECT creator_host, creator_state_dir FROM board") == [
        (socket.gethostname(), str(creator.state_dir))
    ]
    assert not (creator.state_dir / "board.creator").exists()

    result = CliRunner().invoke(main, ["--state-dir", str(joiner.state_dir), "tasks", "list"])
    assert result.exit_code == 2
    message = result.output.strip()
    assert message.startswith(f"corral: no lead token at {joiner.state_dir / 'lead.token'}: ")
    assert f"joined PostgreSQL board {board_id}, which another daemon created" in message
    # It names the daemon that created the board: its host and state directory.
    where = f"{socket.gethostname()}:{creator.state_dir / 'lead.token'}"
    assert message.endswith(f"the board's lead token is in {where}: pass --state-dir {creator.state_dir} or --token"), (
        message
    )
    assert "corral serve" not in message and "start" not in message

    # As it says: the creator's --state-dir serves the Lead.
    result = CliRunner().invoke(main, ["--state-dir", str(creator.state_dir), "tasks", "list"])
    assert result.exit_code == 0, result.output

    # Its lead.token copied in, the joined daemon's state directory serves the Lead.
    shutil.copy(creator.state_dir / "lead.token", joiner.state_dir / "lead.token")
    result = CliRunner().invoke(main, ["--state-dir", str(joiner.state_dir), "tasks", "list"])
    assert result.exit_code == 0, result.output
