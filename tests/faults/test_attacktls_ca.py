"""TLS interception pass (2026-12-06): what the session CA's name constraints admit. A test that
signs with the CA's key plays someone who got that key (it never leaves the host process): the
constraints are what then keeps the sandbox's clients from trusting a leaf for another host.
Servers on 127.0.0.1 only; the client names the host through `server_hostname`."""

from __future__ import annotations

import contextlib
import io
import socket
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from egress.upstreams import http_upstream, server_context

from coderoom.egress.interception import SessionCA, _general_name


def forged_leaf(ca: SessionCA, host: str, *, common_name: bool) -> tuple[bytes, ec.EllipticCurvePrivateKey]:
    """A server certificate for `host` (SAN; CN too when `common_name`) signed with `ca`'s key."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = [x509.NameAttribute(NameOID.COMMON_NAME, host)] if common_name else []
    certificate = (
        x509.CertificateBuilder().subject_name(x509.Name(subject)).issuer_name(ca.certificate.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(ca.not_before).not_valid_after(ca.not_after)
        .add_extension(x509.SubjectAlternativeName([_general_name(host)]), critical=not common_name)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca._key, hashes.SHA256())
    )  # fmt: skip
    return certificate.public_bytes(serialization.Encoding.PEM), key


def verification(ca: SessionCA, host: str, leaf: tuple[bytes, ec.EllipticCurvePrivateKey], folder: Path) -> str:
    """"verified", or the verifier's reason, for a client that trusts `ca` and asks for `host`."""
    with contextlib.redirect_stderr(io.StringIO()), http_upstream(tls=server_context(*leaf, folder, host)) as seen:
        context = ssl.create_default_context(cadata=ca.pem().decode())
        try:
            with socket.create_connection(("127.0.0.1", seen.port), timeout=30) as raw:
                context.wrap_socket(raw, server_hostname=host).close()
        except ssl.SSLCertVerificationError as exc:
            return str(exc.verify_message)
    return "verified"


@pytest.mark.parametrize(
    ("secret_hosts", "forged"),
    [
        (["api.test"], "127.0.0.1"),  # a CA for names only, a leaf for an address
        (["api.test"], "93.184.216.34"),
        (["api.test"], "::1"),
        (["127.0.0.1"], "evil.test"),  # a CA for an address only, a leaf for a name
        (["[::1]"], "evil.test"),
    ],
)
@pytest.mark.parametrize("common_name", [True, False])
def test_a_leaf_of_the_other_name_type_than_the_secret_hosts_does_not_verify(
    tmp_path: Path, secret_hosts: list[str], forged: str, common_name: bool
) -> None:
    ca = SessionCA(secret_hosts)
    outcome = verification(ca, forged, forged_leaf(ca, forged, common_name=common_name), tmp_path)
    assert "subtree violation" in outcome, (secret_hosts, forged, outcome)


@pytest.mark.parametrize(
    ("secret_hosts", "host"),
    [(["127.0.0.1"], "127.0.0.1"), (["[::1]"], "::1"), (["127.0.0.1", "api.test"], "127.0.0.1"), (["127.0.0.1", "api.test"], "api.test")],
)
def test_the_proxys_own_leaf_for_each_secret_host_verifies_whatever_kinds_the_ca_holds(tmp_path: Path, secret_hosts: list[str], host: str) -> None:
    ca = SessionCA(secret_hosts)
    assert verification(ca, host, ca.sign(host), tmp_path) == "verified"
