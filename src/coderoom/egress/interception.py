"""The per-session certificate authority that lets the proxy add a secret's header to HTTPS.

A secret is a header the proxy adds for one host (`rules.Secret`); inside TLS it can only do so
by terminating the sandbox's TLS connection itself. So each egress session with secrets makes
its own CA (`SessionCA`) with the `cryptography` package:

* constrained by X.509 NameConstraints (critical) to the hosts that carry a secret, so a leaf it
  signs for any other name fails verification in the sandbox even if the key leaked (RFC 5280 DNS
  constraints also admit subdomains of those hosts: the proxy itself never signs for them). The
  name type no secret host uses (IP addresses, or DNS names) is excluded whole: a constraint
  binds only the types it names (`name_constraints`);
* valid for CA_VALID_S only (and from a minute before it was made, for clock skew);
* its private key, and the leaf keys, exist only in the host process's memory: never in the
  sandbox, the record or any folder. Python's ssl loads a certificate chain only from a path,
  so a leaf's chain is handed to it through an anonymous memory file (`memfd_create`) that is
  closed once loaded.

The sandbox gets the CA's certificate (public) in a bundle file beside the proxy's socket:
the system's trust roots plus this CA (`bundle`), named by SSL_CERT_FILE and friends
(`session.sandbox_env`).

Why not mitmproxy: the proxy that enforces the allowlist is already ours (h11 on asyncio, one
enforcement point for both backends); interception needs only a CA, leaf certificates and ssl
termination, which `cryptography` and the standard library's ssl give without a second proxy,
its addon model and its dependency tree in the host process.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import ssl
from collections.abc import Iterable
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .policy import literal_ip

CA_VALID_S = 2 * 24 * 3600  # a session longer than this gets refused handshakes from its clients
_SKEW = datetime.timedelta(minutes=1)
# The system trust roots the bundle starts with (the first that exists): Debian/Ubuntu, Fedora/RHEL.
SYSTEM_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem")
MAX_SYSTEM_BUNDLE_BYTES = 4 * 1024 * 1024


def _general_name(host: str) -> x509.GeneralName:
    address = literal_ip(host)
    if address is None:
        return x509.DNSName(host)
    return x509.IPAddress(address)


def _subtree(host: str) -> x509.GeneralName:
    address = literal_ip(host)
    if address is None:
        return x509.DNSName(host)
    return x509.IPAddress(ipaddress.ip_network(address))  # exactly that one address


# Every name of a type: an empty DNS constraint matches all names (OpenSSL, Go), /0 all addresses.
_EVERY_NAME = x509.DNSName("")
_EVERY_ADDRESS = (x509.IPAddress(ipaddress.ip_network("0.0.0.0/0")), x509.IPAddress(ipaddress.ip_network("::/0")))


def name_constraints(hosts: Iterable[str]) -> x509.NameConstraints:
    """Only `hosts`, whatever their kind. RFC 5280 constrains only the name types that have a
    permitted subtree: a CA that permits DNS names alone would still sign for any IP address
    (and one that permits addresses alone, for any DNS name), so the types no host uses are
    excluded whole."""
    permitted = [_subtree(host) for host in hosts]
    excluded: list[x509.GeneralName] = []
    if not any(isinstance(name, x509.DNSName) for name in permitted):
        excluded.append(_EVERY_NAME)
    if not any(isinstance(name, x509.IPAddress) for name in permitted):
        excluded.extend(_EVERY_ADDRESS)
    return x509.NameConstraints(permitted_subtrees=permitted, excluded_subtrees=excluded or None)


class SessionCA:
    """A CA for one egress session that may sign only for `hosts` (names or IP literals)."""

    def __init__(self, hosts: Iterable[str]) -> None:
        self.hosts = tuple(sorted(set(hosts)))
        if not self.hosts:
            raise ValueError("a session CA needs at least one host")
        now = datetime.datetime.now(datetime.timezone.utc)
        self.not_before, self.not_after = now - _SKEW, now + datetime.timedelta(seconds=CA_VALID_S)
        self._key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "coderoom egress session CA")])
        public = self._key.public_key()
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(self.not_before)
            .not_valid_after(self.not_after)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=False, content_commitment=False, key_encipherment=False,
                    data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                    encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )  # fmt: skip
            .add_extension(name_constraints(self.hosts), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self._contexts: dict[str, ssl.SSLContext] = {}

    def pem(self) -> bytes:
        """The CA's certificate (public), PEM."""
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def sign(self, host: str) -> tuple[bytes, ec.EllipticCurvePrivateKey]:
        """A server certificate (PEM) for `host` and its key. Any name may be asked for; only
        the constrained hosts verify (that is what a test of the constraint asks for)."""
        key = ec.generate_private_key(ec.SECP256R1())
        # An address is named by the SAN only: verifiers read a CN that looks like a name as a DNS
        # name under the constraints, which the excluded DNS subtree (or another host's) refuses.
        by_address = literal_ip(host) is not None
        subject = [] if by_address else [x509.NameAttribute(NameOID.COMMON_NAME, host)]
        certificate = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(subject))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self.not_before)
            .not_valid_after(self.not_after)
            .add_extension(x509.SubjectAlternativeName([_general_name(host)]), critical=by_address)  # RFC 5280: critical with an empty subject
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )
        return certificate.public_bytes(serialization.Encoding.PEM), key

    def server_context(self, host: str) -> ssl.SSLContext:
        """The TLS server side the proxy shows the sandbox for `host` (made once per host)."""
        context = self._contexts.get(host)
        if context is None:
            certificate, key = self.sign(host)
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.set_alpn_protocols(["http/1.1"])  # the proxy speaks HTTP/1.1 inside
            private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
            _load_chain(context, private + certificate + self.pem())
            self._contexts[host] = context
        return context


def _load_chain(context: ssl.SSLContext, pem: bytes) -> None:
    """`context.load_cert_chain` from memory: an anonymous memory file, never a path on disk."""
    fd = os.memfd_create("coderoom-egress-leaf", os.MFD_CLOEXEC)
    try:
        os.write(fd, pem)
        context.load_cert_chain(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)


def system_bundle() -> bytes:
    """The system's trust roots (PEM) as the sandbox sees them: the local backend binds the
    host's /etc/ssl, so the first of SYSTEM_BUNDLES that exists (empty when none does)."""
    for path in SYSTEM_BUNDLES:
        with contextlib.suppress(OSError):
            with open(path, "rb") as handle:
                return handle.read(MAX_SYSTEM_BUNDLE_BYTES)
    return b""


def write_bundle(path: Path, ca: SessionCA, system: bytes) -> None:
    """`system` roots plus the session CA, at `path` (0644: the sandbox's uid reads it)."""
    data = system.rstrip(b"\n") + b"\n" + ca.pem() if system.strip() else ca.pem()
    temporary = path.with_name(path.name + ".new")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, data)
        os.fchmod(fd, 0o644)
    finally:
        os.close(fd)
    os.replace(temporary, path)
