"""The state directory: one owner, private permissions, no symlinks (design §2 inv. 7, §3)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap

import pytest

from corrald.statedir import StateDir, StateDirError

pytestmark = pytest.mark.timeout(30)


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def state(tmp_path):
    made: list[StateDir] = []

    def make(root=None) -> StateDir:
        sd = StateDir(root or tmp_path / "state")
        made.append(sd)
        return sd

    yield make
    for sd in made:
        sd.release()


def test_fresh_directory_is_private(state, tmp_path):
    sd = state(tmp_path / "deep" / "state")
    sd.acquire()
    assert mode(sd.paths.root) == 0o700
    assert mode(sd.paths.lock) == 0o600
    assert sd.paths.lock.read_text() == str(os.getpid())
    token = sd.lead_token()
    assert mode(sd.paths.lead_token) == 0o600
    assert token.startswith("corral-lead-") and len(token) > 40
    assert sd.lead_token() == token  # made once, then read back


def test_existing_private_enough_directory_is_tightened(state, tmp_path):
    root = tmp_path / "state"
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)
    state(root).acquire()
    assert mode(root) == 0o700


def test_second_acquire_names_the_holder(state):
    first = state()
    first.acquire()
    with pytest.raises(StateDirError) as caught:
        state().acquire()
    assert str(os.getpid()) in str(caught.value)
    # The holder's lock file is left alone by the refused attempt.
    assert first.paths.lock.read_text() == str(os.getpid())


def test_second_daemon_process_is_refused(state):
    holder = state()
    holder.acquire()
    script = textwrap.dedent(f"""
        import pathlib, sys
        from corrald.statedir import StateDir, StateDirError
        try:
            StateDir(pathlib.Path({str(holder.paths.root)!r})).acquire()
        except StateDirError as error:
            print(error)
            sys.exit(3)
        sys.exit(0)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=20)
    assert done.returncode == 3, done.stderr
    assert f"pid {os.getpid()}" in done.stdout


def test_released_directory_can_be_taken_again(state):
    first = state()
    first.acquire()
    first.release()
    second = state()
    second.acquire()
    assert second.paths.lock.read_text() == str(os.getpid())


@pytest.mark.parametrize("bits", [0o770, 0o707, 0o720])
def test_group_or_other_writable_directory_is_refused(state, tmp_path, bits):
    root = tmp_path / "state"
    root.mkdir()
    os.chmod(root, bits)
    with pytest.raises(StateDirError) as caught:
        state(root).acquire()
    assert "writable" in str(caught.value)
    assert mode(root) == bits  # not silently "fixed"
    assert not (root / "corrald.lock").exists()


@pytest.mark.parametrize("name", ["corral.sqlite3", "lead.token", "corrald.lock"])
def test_symlinked_file_is_refused(state, tmp_path, name):
    root = tmp_path / "state"
    root.mkdir(mode=0o700)
    target = tmp_path / "elsewhere"
    target.write_text("")
    (root / name).symlink_to(target)
    with pytest.raises(StateDirError) as caught:
        state(root).acquire()
    assert name in str(caught.value) and "symbolic link" in str(caught.value)


def test_dangling_symlinked_database_is_refused(state, tmp_path):
    root = tmp_path / "state"
    root.mkdir(mode=0o700)
    (root / "corral.sqlite3").symlink_to(tmp_path / "does-not-exist")
    with pytest.raises(StateDirError):
        state(root).acquire()
    assert not (tmp_path / "does-not-exist").exists()


def test_symlinked_state_directory_is_refused(state, tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(StateDirError):
        state(link).acquire()


def test_a_file_in_place_of_the_directory_is_a_state_dir_error(state, tmp_path):
    root = tmp_path / "state"
    root.write_text("not a directory")
    with pytest.raises(StateDirError) as caught:
        state(root).acquire()
    assert "not a directory" in str(caught.value)


@pytest.mark.timeout(10)
def test_a_lead_token_readable_by_others_is_made_private(state, tmp_path):
    sd = state()
    sd.acquire()
    token = sd.lead_token()
    os.chmod(sd.paths.lead_token, 0o644)
    assert sd.lead_token() == token, "the token is kept, not replaced"
    assert stat.S_IMODE(sd.paths.lead_token.stat().st_mode) == 0o600
