"""TLS serving with a real certificate: `corrald serve --tls-cert --tls-key` on loopback TCP,
the SDK's Lead and Teammate connecting with `root_certificates`, and a client that does not
trust the certificate (or speaks plaintext) getting nowhere."""

from __future__ import annotations

import pytest

from corral import Claim, Lead, TaskSpec, TaskState, Teammate, Unavailable
from tests.support.tls import self_signed


@pytest.fixture
def tls_lead(tmp_path):
    cert, key = self_signed(tmp_path, "corrald-test")
    tls = ["--tls-cert", str(cert), "--tls-key", str(key)]
    with Lead.launch(
        tmp_path / "state", listen="127.0.0.1:0", extra_args=tls, root_certificates=cert.read_bytes()
    ) as lead:
        yield lead, cert.read_bytes()


@pytest.mark.timeout(60)
def test_lead_and_teammate_work_over_tls(tls_lead):
    lead, ca = tls_lead
    assert lead.address.startswith("127.0.0.1:")
    mate = lead.add_teammate("secure")
    lead.create_tasks([TaskSpec(id="over-tls", title="over TLS")])
    with Teammate.connect(lead.address, mate.token, root_certificates=ca) as teammate:
        claim = next(item for item in teammate.idle(max_idle_polls=1) if isinstance(item, Claim))
        claim.complete(b"sealed")
    task = lead.get_task("over-tls")
    assert task.state == TaskState.COMPLETED and task.result == b"sealed"


@pytest.mark.timeout(60)
def test_untrusted_certificate_and_plaintext_are_refused(tls_lead, tmp_path):
    lead, _ = tls_lead
    other_ca, _ = self_signed(tmp_path, "someone-else")
    token = (lead.state_dir / "lead.token").read_text()
    # A handshake that fails is a daemon not reached: connect says so once its budget is spent.
    with pytest.raises(Unavailable, match="cannot reach corrald at"):
        Lead.connect(lead.address, token, root_certificates=other_ca.read_bytes(), connect_timeout=1)
    with pytest.raises(Unavailable, match="cannot reach corrald at"):
        Lead.connect(lead.address, token, connect_timeout=1)
    with (
        Lead.connect(lead.address, token, root_certificates=other_ca.read_bytes(), connect_timeout=0) as stranger,
        pytest.raises(Unavailable),
    ):
        stranger.get_stats()
    with Lead.connect(lead.address, token, rpc_timeout=5, connect_timeout=0) as plaintext, pytest.raises(Unavailable):
        plaintext.get_stats()
    assert lead.get_stats().open_streams == 0  # the trusted Lead is still served
