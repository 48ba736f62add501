"""Finding the daemon, and the one-line errors when it cannot be found or refuses."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import corral
from corral.cli import main


def run(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


@pytest.mark.timeout(30)
def test_no_daemon_configured_is_a_usage_error(error_line):
    result = run("tasks", "list")
    assert result.exit_code == 2
    line = error_line(result)
    assert "--state-dir" in line and "CORRAL_ADDRESS" in line


@pytest.mark.timeout(30)
def test_state_dir_without_a_daemon_is_a_usage_error(tmp_path, error_line):
    result = run("tasks", "list", "--state-dir", str(tmp_path))
    assert result.exit_code == 2
    assert f"no lead token at {tmp_path / 'lead.token'}" in error_line(result)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "note",
    [
        '{"host": "build-7", "state_dir": "/srv/corral a"}',
        None,  # a board created before its creator was recorded
        "not json",
        '{"host": "build-7"}',
    ],
)
def test_a_joined_boards_state_dir_names_where_the_lead_token_is(tmp_path, error_line, note):
    (tmp_path / "board.id").write_text("5f0c3a8e-0000-4000-8000-000000000000\n")
    if note is not None:
        (tmp_path / "board.creator").write_text(note)
    result = run("tasks", "list", "--state-dir", str(tmp_path))
    assert result.exit_code == 2
    line = error_line(result)
    assert "joined PostgreSQL board 5f0c3a8e-0000-4000-8000-000000000000" in line and "start" not in line
    if note is not None and note.endswith('a"}'):
        assert line.endswith(
            "the board's lead token is in build-7:/srv/corral a/lead.token: pass --state-dir '/srv/corral a' or --token"
        ), line
    else:  # nothing names the creator: the state directory to look for is described
        assert "the one with a lead.token and this board.id" in line, line


@pytest.mark.timeout(30)
def test_missing_state_dir_is_a_usage_error(tmp_path, error_line):
    missing = tmp_path / "nonexistent"
    result = run("--state-dir", str(missing), "tasks", "list")
    assert result.exit_code == 2
    assert error_line(result).startswith(f"corral: no state directory at {missing}")


@pytest.mark.timeout(30)
def test_a_running_daemon_without_a_lead_token_is_not_told_to_start(tmp_path, error_line):
    state_dir = tmp_path / "state"
    with corral.Lead.launch(state_dir, ready_timeout=30) as lead:
        (state_dir / "lead.token").unlink()
        result = run("tasks", "list", "--state-dir", str(state_dir))
        assert result.exit_code == 2
        pid = lead.pid
        assert error_line(result) == (
            f"corral: no lead token at {state_dir / 'lead.token'}, though corrald pid {pid} serves {state_dir}:"
            " pass --token"
        )


@pytest.mark.timeout(30)
def test_stopped_daemon_cannot_be_reached(tmp_path, error_line):
    state_dir = tmp_path / "state"
    with corral.Lead.launch(state_dir, ready_timeout=30):
        pass  # the daemon has stopped; its lead.token stays behind
    commands = (["tasks", "list"], ["stats", "--json"], ["watch", "--no-follow"], ["plans", "list"], ["web"])
    for command in commands:
        result = run(*command, "--state-dir", str(state_dir))
        assert result.exit_code == 3, (command, result.output)
        expected = f"corral: UNAVAILABLE: cannot reach corrald at unix:{state_dir / 'corral.sock'} (is it running?)"
        assert error_line(result) == expected


@pytest.mark.timeout(30)
def test_unreachable_address_from_the_environment(tmp_path, error_line):
    address = f"unix:{tmp_path / 'nothing.sock'}"
    result = run("teammates", "list", env={"CORRAL_ADDRESS": address, "CORRAL_TOKEN": "x"})
    assert result.exit_code == 3
    assert error_line(result) == f"corral: UNAVAILABLE: cannot reach corrald at {address} (is it running?)"


@pytest.mark.timeout(60)
def test_wrong_token_is_refused_in_one_line(cli, error_line):
    result = cli("tasks", "list", "--token", "not-a-token")
    assert result.exit_code == 1
    assert error_line(result).startswith("corral: UNAUTHENTICATED: corrald refused the credential from --token")


@pytest.mark.timeout(60)
def test_a_teammate_token_cannot_run_lead_commands(cli, lead, error_line):
    new = lead.add_teammate("ann")
    env = {"CORRAL_ADDRESS": lead.address, "CORRAL_TOKEN": new.token}
    result = cli("teammates", "add", "bob", env=env, connect=False)
    assert result.exit_code == 1
    line = error_line(result)
    assert line.startswith("corral: PERMISSION_DENIED: ") and "lead token" in line
    # Board reads are open to teammates.
    assert cli("tasks", "list", "--json", env=env, connect=False).exit_code == 0
