"""The server name a TLS ClientHello asks for, read from bytes a sandbox sent (hostile).

The proxy reads the first handshake message of a CONNECT tunnel before it connects upstream, so
a client cannot ask the proxy for one host and the TLS server for another (domain fronting
through the SNI). Only the ClientHello's framing and its server_name extension are read, every
length checked against what is there; anything else is "not a ClientHello".
"""

from __future__ import annotations

MAX_HELLO_BYTES = 64 * 1024  # a ClientHello with post-quantum key shares is about 2 KiB
_HANDSHAKE, _CLIENT_HELLO, _SERVER_NAME, _HOST_NAME = 22, 1, 0, 0


class NotClientHello(ValueError):
    """The bytes are not the start of a TLS ClientHello."""


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.data):
            raise NotClientHello("a length runs past the end of the ClientHello")
        chunk = self.data[self.at : self.at + n]
        self.at += n
        return chunk

    def number(self, n: int) -> int:
        return int.from_bytes(self.take(n), "big")

    def vector(self, length_bytes: int) -> bytes:
        return self.take(self.number(length_bytes))


def handshake_bytes(records: bytes) -> tuple[bytes, bool]:
    """The handshake payload of the TLS records at the start of `records`, and whether it holds a
    whole ClientHello (False: read more). NotClientHello if it is not TLS handshake records."""
    payload, at = b"", 0
    while at + 5 <= len(records):
        kind, major, length = records[at], records[at + 1], int.from_bytes(records[at + 3 : at + 5], "big")
        if kind != _HANDSHAKE or major != 3 or not 0 < length <= 16384 + 2048:
            raise NotClientHello("not a TLS handshake record")
        if at + 5 + length > len(records):
            break
        payload += records[at + 5 : at + 5 + length]
        at += 5 + length
        if len(payload) >= 4:
            if payload[0] != _CLIENT_HELLO:
                raise NotClientHello("the first handshake message is not a ClientHello")
            if len(payload) >= 4 + int.from_bytes(payload[1:4], "big"):
                return payload, True
    if at == 0 and len(records) >= 1 and records[0] != _HANDSHAKE:
        raise NotClientHello("not a TLS handshake record")
    return payload, False


def server_name(records: bytes) -> str | None:
    """The host_name of the server_name extension of the ClientHello that `records` start with
    (None when it has none). NotClientHello if `records` are not a whole ClientHello."""
    payload, whole = handshake_bytes(records)
    if not whole:
        raise NotClientHello("the ClientHello is incomplete")
    hello = _Reader(payload[4 : 4 + int.from_bytes(payload[1:4], "big")])
    hello.take(2 + 32)  # legacy_version, random
    hello.vector(1)  # legacy_session_id
    hello.vector(2)  # cipher_suites
    hello.vector(1)  # legacy_compression_methods
    if hello.at == len(hello.data):
        return None  # no extensions at all
    extensions = _Reader(hello.vector(2))
    found: str | None = None
    seen: set[int] = set()
    while extensions.at < len(extensions.data):
        kind, body = extensions.number(2), extensions.vector(2)
        if kind in seen:
            raise NotClientHello("an extension appears twice")
        seen.add(kind)
        if kind == _SERVER_NAME:
            names = _Reader(_Reader(body).vector(2))
            while names.at < len(names.data):
                name_type, name = names.number(1), names.vector(2)
                if name_type == _HOST_NAME:
                    if found is not None:
                        raise NotClientHello("two host names in server_name")
                    try:
                        found = name.decode("ascii")
                    except UnicodeDecodeError:
                        raise NotClientHello("a server name that is not ASCII") from None
    return found
