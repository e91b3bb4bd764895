"""The part of a `--ray` live session that runs on its cluster node: `SessionActor`, one
`Session` (its sandbox, kernel and workspace on this node, in the node's own sandbox backend,
prepared as every command prepares it) in a temporary runs folder of its own, removed when the
session is done (leased to the actor's worker, so `coderoom sandbox prune` removes it when the
actor died instead: `cluster.node_folders`). `ray_session` makes it a Ray actor; its calls are the session's, and
`tail` hands the record's lines to the driver as they are written, which keeps a copy of them
so that a session whose node is lost still has its record so far. A reply's progress is no line
of the record (`record.events.LIVE_ONLY`): the actor sends it to the driver's `ProgressBox`
through `cluster.progress.NodeProgress` (bounded in rate and bytes), as a batch job's node does.

A warm pool's actor (`ray_pool`) starts its sandbox and kernel before any session
(`warm`, with the server's sandbox spec); the session opened in it later takes that sandbox.

Nothing here imports Ray but `place` (where the actor runs), asked only inside the actor.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any, Literal

from ..cluster import node_folders
from ..cluster.progress import NodeProgress, ProgressBoxHandle
from ..cluster.transfer import pack_back
from ..errors import SessionClosed
from ..record.events import ModelStream
from ..record.names import RECORD_FILE
from ..sandboxes.registry import prepare_backend
from ..sandboxes.spec import EnvironmentSpec, SandboxSpec
from .sandbox import LiveSandbox
from .session import AskResult, CellResult, CommandResult, FileInfo, Session

TAIL_BYTES = 4 * 1024**2  # of record lines one `tail` hands back (a longer line goes whole)
TAIL_WAIT_S = 5.0  # how long a `tail` with nothing new waits for a line before it answers empty


class SessionActor:
    """One live session on this node. Its methods are `Session`'s, called by `RaySession`."""

    def __init__(self) -> None:
        self._folder = node_folders.make()
        self._session: Session | None = None
        self._written = asyncio.Event()  # set at each record event; `tail` waits on it
        self._follower: asyncio.Task[None] | None = None
        self._warm: LiveSandbox | None = None  # started ahead of the session (a warm pool's actor)
        self._progress: NodeProgress | None = None  # the ask in flight's, when the driver handed it a box

    def place(self) -> tuple[str, str]:
        """This node's Ray id and address."""
        import ray

        return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()

    async def warm(self, spec: SandboxSpec) -> None:
        """Start the sandbox of `spec` (the server's) and its kernel with WARM_MODULES imported,
        for the session a later `open` opens here."""
        prepare_backend(spec, lambda line: None)
        live = await LiveSandbox.start(spec)
        try:
            await live.warm()
        except BaseException:
            await live.aclose()
            raise
        self._warm = live

    async def answers(self) -> bool:
        """Whether the warm sandbox is alive, its kernel answering with its state intact."""
        return self._warm is not None and await self._warm.answers()

    async def open(self, settings: dict[str, Any]) -> str:
        """Open the session here (`Session.open`'s keywords but the runs folder, which is this
        actor's), in the warm sandbox if there is one; its run folder's name."""
        environment = settings["environment"] or EnvironmentSpec()
        prepare_backend(SandboxSpec(backend=settings["sandbox"], limits=settings["limits"], environment=environment), lambda line: None)
        warm, self._warm = self._warm, None
        session = await Session.open(**settings, runs_dir=self._folder, pool=_Handed(warm) if warm is not None else None)
        self._session = session
        self._follower = asyncio.ensure_future(self._follow(session))
        return session.run_dir.name

    async def _follow(self, session: Session) -> None:
        """Wake `tail` at each record event; send each reply's progress while an ask that was
        handed a box runs (the record's own events go by `tail`: each one sends what progress
        was held back first, so it comes before)."""
        async for event in session.subscribe():
            progress = self._progress
            if progress is not None and isinstance(event, ModelStream):
                progress(event)
            elif progress is not None:
                progress.flush()
            self._written.set()
        self._written.set()

    @property
    def session(self) -> Session:
        if self._session is None:
            raise SessionClosed("the session is not open on its node")
        return self._session

    async def tail(self, offset: int) -> bytes:
        """The record's whole lines from byte `offset` on (at most TAIL_BYTES, or one longer line),
        waiting up to TAIL_WAIT_S when there are none yet; b"" when none came."""
        path = self.session.run_dir / RECORD_FILE
        while True:
            self._written.clear()
            data = await asyncio.to_thread(_lines_from, path, offset)
            if data:
                return data
            try:
                await asyncio.wait_for(self._written.wait(), TAIL_WAIT_S)
            except TimeoutError:
                return b""

    async def ask(self, request: str, progress: tuple[ProgressBoxHandle, str] | None = None) -> AskResult:
        """The session's ask (the driver sends one at a time). `progress`: the driver's box and
        this session's key in it, open while the ask runs, for its replies' progress."""
        self._progress = NodeProgress(*progress) if progress else None
        try:
            return await self.session.ask(request)
        finally:
            self._progress = None

    async def run_python(self, code: str) -> CellResult:
        return await self.session.run_python(code)

    async def interrupt(self) -> bool:
        return await self.session.interrupt()

    async def stop(self) -> Literal["ask", "cell"] | None:
        return await self.session.stop()

    async def exec(self, command: str, timeout: float | None) -> CommandResult:
        return await self.session.exec(command, timeout)

    async def write_file(self, path: str, data: bytes) -> None:
        await self.session.write_file(path, data)

    async def read_file(self, path: str, max_bytes: int, head: bool) -> bytes:
        return await self.session.read_file(path, max_bytes, head=head)

    async def files(self, quiet: bool) -> list[FileInfo]:
        return await self.session.files(quiet=quiet)

    async def close(self, keep_unsaved: bool) -> tuple[bytes | None, str | None]:
        """Close and save the session as on one machine (`SaveFailed` with `keep_unsaved`
        leaves it open), then its run folder as `cluster.transfer.pack_back` sends it."""
        session = self.session
        await session.close(keep_unsaved=keep_unsaved)
        return await asyncio.to_thread(pack_back, session.run_dir)

    def remove(self) -> None:
        """The temporary runs folder, once the driver has the run folder (or gave up on it)."""
        shutil.rmtree(self._folder, ignore_errors=True)

    async def retire(self) -> None:
        """A warm pool's actor no session took: its sandbox closed, its folder removed."""
        warm, self._warm = self._warm, None
        if warm is not None:
            await warm.aclose()
        self.remove()


class _Handed:
    """The warm sandbox, as `Session.open` takes one from a pool: for its own spec only (one
    the driver's pool matched; another is closed, and the session starts its own)."""

    def __init__(self, live: LiveSandbox) -> None:
        self._live = live

    async def claim(self, spec: SandboxSpec) -> LiveSandbox | None:
        if spec.model_dump() == self._live.spec.model_dump():
            return self._live
        await self._live.aclose()
        return None


def _lines_from(path: Path, offset: int) -> bytes:
    """Whole lines of `path` from `offset`: up to the last newline within TAIL_BYTES, or the one
    line that starts there if it is longer (the record's own bound, MAX_LINE_BYTES, holds it)."""
    try:
        with path.open("rb") as file:
            file.seek(offset)
            data = file.read(TAIL_BYTES)
            end = data.rfind(b"\n")
            if end < 0 and len(data) == TAIL_BYTES:
                file.seek(offset)
                line = file.readline()
                return line if line.endswith(b"\n") else b""  # still being written
    except OSError:
        return b""
    return data[: end + 1]
