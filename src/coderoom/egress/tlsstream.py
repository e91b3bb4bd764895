"""The server side of TLS over an asyncio stream whose first bytes were already read.

The proxy reads a tunnel's ClientHello itself (its SNI must be the CONNECT host, `tls`) before
it decides to terminate TLS for a host with a secret, so asyncio's `start_tls`, which starts
from an unread stream, does not fit: this feeds those bytes, then the rest of the stream, to an
`ssl.SSLObject` over memory BIOs. It offers the few stream calls the proxy's HTTP code uses
(`read`, `write`, `drain`), so the same h11 exchange serves plain HTTP and intercepted HTTPS.
"""

from __future__ import annotations

import asyncio
import ssl

_CHUNK = 64 * 1024


class TlsServerStream:
    """TLS terminated by the proxy on the sandbox's connection (`reader`, `writer`)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, context: ssl.SSLContext, early: bytes) -> None:
        self._reader, self._writer = reader, writer
        self._incoming, self._outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._incoming.write(early)
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)

    def _flush(self) -> None:
        pending = self._outgoing.read()
        if pending:
            self._writer.write(pending)

    async def _feed(self) -> None:
        self._flush()
        await self._writer.drain()
        data = await self._reader.read(_CHUNK)
        if data:
            self._incoming.write(data)
        else:
            self._incoming.write_eof()

    async def handshake(self) -> None:
        """Complete the handshake; ssl.SSLError (or ConnectionError) if the sandbox's client
        gives up, for instance because it does not trust the certificate."""
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self._feed()
        self._flush()
        await self._writer.drain()

    async def read(self, n: int = _CHUNK) -> bytes:
        """Up to `n` plaintext bytes; b"" at the end (close_notify or the stream's end)."""
        while True:
            try:
                return self._tls.read(n)
            except ssl.SSLWantReadError:
                await self._feed()
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b""

    def write(self, data: bytes) -> None:
        self._tls.write(data)
        self._flush()

    async def drain(self) -> None:
        await self._writer.drain()

    def can_write_eof(self) -> bool:
        return False

    def write_eof(self) -> None:
        raise NotImplementedError("TLS has close_notify, not a half close")
