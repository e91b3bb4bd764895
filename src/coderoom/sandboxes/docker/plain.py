"""One command in a fresh docker sandbox without docker-py or asyncio: `coderoom sandbox run
--sandbox docker` in its plain form (the CLI's fast path, `cli.sandbox_run`).

The container is the full path's own: `request.create_request` makes the body both post, init.py
runs the command from `request.command_request`, and `request.command_result` reads its reply;
the stream is read through `frames`, within the same line bound as a session's channel. What is
different is only how the engine is spoken to (`engine`, over its Unix socket) and the order:
GET /version (the engine's CPU, for the seccomp program) is sent before the create request's
code loads, and the command is written to the container's stdin as soon as it is attached,
before it starts, so init.py finds it waiting as it comes up (the attach-then-start of `docker
run`).

Anything this path does not do the same way is left to the full path before anything is made
(`run_plain` returns None): network = true (the session network and its routes), an allowlist
(the egress proxy runs in the full path's event loop; `DockerBackend.run_plain`), an engine that
is not a local socket or does not answer (the full path says why), a missing image (the full path
builds it), no `docker` package (the full path says so). The container is removed (`force`)
before the result is handed back, and on any error or signal: it is created while the stop
signals are held (`signal_masks`), so one that comes in between still finds its id.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from ... import signal_masks
from ...errors import SandboxFailed
from ..limits import Limits
from .engine import Engine, EngineError, socket_path
from .frames import STDOUT, Lines, frames, line_bound
from .labels import DEFAULT_IMAGE

if TYPE_CHECKING:
    from ..core import CommandResult

GONE = "the sandbox's init process went away (container stopped or removed)"  # `channel`'s words


def run_plain(limits: Limits, argv: list[str], *, image: str = DEFAULT_IMAGE) -> CommandResult | None:
    """Run `argv` in a new sandbox with `limits` and remove it; None (nothing made) when the full
    path must take it (see the module docstring)."""
    path = socket_path(os.environ)
    if limits.network or path is None or not _has_docker_py():
        return None
    engine = Engine(path)
    container_id = None
    try:
        try:
            version = engine.send("GET", "/version")
        except OSError:
            return None
        # loaded while the engine answers (its /version asks containerd, runc and docker-init
        # for theirs: several ms, against a tenth of one for /_ping)
        from .request import create_request, seccomp_for

        try:
            machine = str(version().get("Arch", ""))
        except (OSError, EngineError, ValueError, AttributeError):
            return None
        name, body = create_request(limits, image=image, program=seccomp_for(machine))
        with signal_masks.held():
            try:
                container_id = str(engine.call("POST", f"/containers/create?name={quote(name)}", body)["Id"])
            except EngineError as e:
                if e.status == 404:  # no such image
                    return None
                raise SandboxFailed(f"the docker sandbox could not be created: {e.message}") from e
        return _run(engine, container_id, limits, argv)
    finally:
        if container_id is not None:
            with signal_masks.held():  # a second signal must not cut the removal short
                _remove(engine, container_id)
        engine.close()


def _has_docker_py() -> bool:
    """Whether `docker` is installed (found, not imported: the full path says so when it is not)."""
    try:
        return find_spec("docker") is not None
    except ImportError:  # a finder that refuses it (tests hide it this way)
        return False


def _run(engine: Engine, container_id: str, limits: Limits, argv: list[str]) -> CommandResult:
    from .request import REPLY_SLACK_S, WORKSPACE, command_request, command_result  # loaded by run_plain

    timeout, cap, rid = limits.timeout, limits.output_bytes, os.urandom(16).hex()
    wait = timeout + REPLY_SLACK_S
    request = command_request(argv, cwd=WORKSPACE, timeout=timeout, cap=cap)
    try:
        raw, recv = engine.attach(container_id)
    except (OSError, EngineError) as e:
        raise SandboxFailed(f"the docker sandbox is unreachable: {e}") from e
    try:
        # the empty line tells init.py the host has attached (its --contact-within)
        raw.sendall(b"\n" + json.dumps({**request, "id": rid}).encode() + b"\n")
        try:
            engine.call("POST", f"/containers/{container_id}/start")
        except EngineError as e:
            raise SandboxFailed(f"the docker sandbox could not start: {e.message}") from e
        reply = _reply(raw, recv, rid, bound=line_bound(2 * cap), deadline=time.monotonic() + wait)
    except TimeoutError as e:
        raise SandboxFailed(f"the sandbox's init did not answer within {wait:g} s") from e
    except (OSError, ValueError) as e:
        raise SandboxFailed(f"the docker sandbox is unreachable: {e}") from e
    finally:
        raw.close()
    return command_result(reply, timeout=timeout, limits=limits)


def _reply(
    raw: socket.socket, recv: Callable[[int], bytes], rid: str, *, bound: int, deadline: float
) -> dict[str, Any]:
    """init.py's final reply to request `rid`; TimeoutError past `deadline`, ConnectionError
    when the stream ends first, ValueError for a line over `bound` or one that is not JSON."""
    lines = Lines()

    def timed_recv(size: int) -> bytes:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        raw.settimeout(left)
        return recv(size)

    for stream, chunk in frames(timed_recv):
        if stream != STDOUT:
            import logging

            logging.getLogger(__name__).warning("sandbox init: %s", chunk[:4096].decode(errors="replace").rstrip())
            continue
        for line in lines.feed(chunk, bound):
            reply = json.loads(line)
            if isinstance(reply, dict) and reply.get("id") == rid and "data" not in reply:
                return reply
    raise ConnectionError(GONE)


def _remove(engine: Engine, container_id: str) -> None:
    """Kill and remove in one call, as `container.remove_container`: nothing left behind."""
    try:
        engine.call("DELETE", f"/containers/{container_id}?force=1")
    except EngineError as e:
        if e.status not in (404, 409):  # gone already; its removal already under way
            raise SandboxFailed(f"the docker sandbox could not be removed: {e.message}") from e
    except OSError as e:
        raise SandboxFailed(f"the docker sandbox could not be removed: {e}") from e
