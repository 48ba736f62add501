"""Running it (design §3 state dir, §6 serve options)."""

from __future__ import annotations

import stat

import pytest

from corral.v1 import corral_pb2 as pb
from tests.support import start_refused

from .wire import spec


def _mode(path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@pytest.mark.sqlite_only  # checks the SQLite file's permissions
@pytest.mark.timeout(30)
def test_state_dir_and_its_files_are_private(daemon):
    daemon.create_tasks(spec("x"))
    root = daemon.state_dir
    assert _mode(root) == 0o700
    for name in ("corral.sqlite3", "lead.token", "corrald.lock", "corral.sock"):
        assert _mode(root / name) == 0o600, f"{name} is {oct(_mode(root / name))}"
    assert daemon.address == f"unix:{root / 'corral.sock'}"
    assert daemon.ready.get("pid") == daemon.pid


@pytest.mark.timeout(30)
def test_listening_on_loopback_tcp(corrald):
    daemon = corrald(extra_args=["--listen", "127.0.0.1:0"])
    host, _, port = daemon.address.rpartition(":")
    assert host == "127.0.0.1" and port.isdigit() and int(port) > 0, daemon.address
    assert daemon.create_tasks(spec("over-tcp"))[0].id == "over-tcp"
    assert daemon.get_task("over-tcp").state == pb.TASK_STATE_PENDING


@pytest.mark.timeout(30)
def test_non_loopback_tcp_without_tls_is_refused(tmp_path):
    code, stderr = start_refused(tmp_path / "state", ["--listen", "0.0.0.0:0"])
    assert code != 0, stderr
    assert "tls" in stderr.lower(), stderr
