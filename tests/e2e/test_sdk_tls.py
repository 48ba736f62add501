"""TLS serving with a real certificate: `corrald serve --tls-cert --tls-key` on loopback TCP,
the SDK's Lead and Teammate connecting with `root_certificates`, and a client that does not
trust the certificate (or speaks plaintext) getting nowhere."""

from __future__ import annotations

import datetime
import ipaddress
import pathlib

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from corral import Claim, Lead, TaskSpec, TaskState, Teammate, Unavailable


def _self_signed(directory: pathlib.Path, common_name: str) -> tuple[pathlib.Path, pathlib.Path]:
    """A certificate for 127.0.0.1 and localhost, and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / f"{common_name}.crt", directory / f"{common_name}.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


@pytest.fixture
def tls_lead(tmp_path):
    cert, key = _self_signed(tmp_path, "corrald-test")
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
    other_ca, _ = _self_signed(tmp_path, "someone-else")
    token = (lead.state_dir / "lead.token").read_text()
    with (
        Lead.connect(lead.address, token, root_certificates=other_ca.read_bytes(), rpc_timeout=5) as stranger,
        pytest.raises(Unavailable),
    ):
        stranger.get_stats()
    with Lead.connect(lead.address, token, rpc_timeout=5) as plaintext, pytest.raises(Unavailable):
        plaintext.get_stats()
    assert lead.get_stats().open_streams == 0  # the trusted Lead is still served
