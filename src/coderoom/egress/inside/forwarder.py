"""Runs INSIDE an allowlisted sandbox (standard library only): 127.0.0.1:PORT to the host proxy.

The sandbox has no network interface but lo; the host proxy's Unix socket is bound read-only
into it. Programs find the proxy through HTTP_PROXY and friends at 127.0.0.1:PORT, which this
forwarder listens on and relays, byte for byte, to the socket: it decides nothing (a sandboxed
program could as well connect to the socket itself; the proxy is the one enforcement point).

    python3 -I -c SOURCE SOCKET_PATH PORT

prints "ready" on stdout once it listens.
"""

import asyncio
import sys

CHUNK = 65536


async def _pipe(reader, writer):
    try:
        while True:
            data = await reader.read(CHUNK)
            if not data:
                break
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        writer.close()


async def _handle(socket_path, reader, writer):
    try:
        up_reader, up_writer = await asyncio.open_unix_connection(socket_path)
    except OSError:
        writer.close()
        return
    try:
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
    finally:
        up_writer.close()
        writer.close()


async def _serve(socket_path, port):
    server = await asyncio.start_server(lambda r, w: _handle(socket_path, r, w), "127.0.0.1", port)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(_serve(sys.argv[1], int(sys.argv[2])))
