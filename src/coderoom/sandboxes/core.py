"""The sandbox core: what a started sandbox does, with no Agents SDK in sight.

Each isolating backend implements `Sandbox` in its own package (`local/`, `docker/`) and hands
one out from `SandboxBackend.start(spec)`. `coderoom sandbox run`, other frameworks and plain
scripts use this API directly; the SDK's client and session classes are thin adapters over it
(importing the SDK costs about 2 s of CPU, a whole bwrap sandbox a few ms).

Paths are workspace-relative (`PurePosixPath("output/x.csv")`); a backend refuses a path that
leaves the workspace. Every call is bounded: commands by the spec's wall clock and output cap,
reads by `max_bytes`, archives by the workspace size.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import IO, Protocol


# `sh -c READ_IN_WORKSPACE sh PATH ROOT N`: at most N bytes of PATH, run inside a sandbox for a
# path the host will not open itself (it passes through a symlink). The path is resolved there,
# where a link cannot reach the host, and read only if it lands on a regular file under ROOT, the
# sandbox's workspace root (/workspace, or the Manifest.root the backend took; not
# /proc/self/pagemap, a "regular" file of ~256 GiB); the sandbox stops at N bytes (`head -c`), so
# the host never buffers more. Exit 3: outside ROOT; 1: not a regular file.
READ_IN_WORKSPACE = (
    'real=$(readlink -f -- "$1") && case "$real" in "$2"/*) ;; *) exit 3 ;; esac '
    '&& test -f "$real" && exec head -c "$3" -- "$real"'
)


@dataclass
class CommandResult:
    exit_code: int  # base.EXIT_TIMEOUT when the wall clock killed it, base.EXIT_KILLED on SIGKILL
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    stopped_by: str | None = None  # the limit that stopped it, named with its value

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


class Sandbox(Protocol):
    """A started sandbox. `close` is idempotent and removes everything the sandbox had."""

    async def exec(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        """Run `argv` (no shell) as the sandbox user; `timeout` may only shorten the spec's."""

    async def read_file(self, path: PurePosixPath, *, max_bytes: int) -> bytes:
        """A workspace file's bytes; FileNotFoundError if absent, OverflowError past max_bytes."""

    async def write_file(self, path: PurePosixPath, data: bytes | IO[bytes]) -> None:
        """Create or replace a workspace file (parents made), never through a symlink."""

    async def archive(self) -> IO[bytes]:
        """A tar of the workspace (relative names), bounded by the workspace size."""

    async def hydrate(self, tar: IO[bytes]) -> None:
        """Unpack a tar into the workspace with the hardened extraction."""

    async def close(self) -> None:
        """Stop every process and remove the sandbox and its workspace."""
