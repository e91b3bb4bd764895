"""Snapshots restored and refused (issue 12): seconds, peak RSS growth and host temp space of
`hydrate_workspace`, coderoom's local and docker backends beside the SDK's unconfined unix_local,
in one run. `python3 benchmarks/snapshot_bench.py`

Cases: a real snapshot (2,000 files, hard links, symlinks; restored), a tar of 10^6 empty-file
headers (made as it is read, never on disk), a header claiming a 1 TB file with no data, a
100 MB snapshot cut in half, and a gzip of random bytes. Each runs in a fresh session.
"""

from __future__ import annotations

import asyncio
import gzip
import io
import os
import resource
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from sandbox.host_temp import host_temp_peak  # noqa: E402
from sandbox.test_snapshots import _ManyMembers, _huge_claim  # noqa: E402

from coderoom.sandboxes import Limits, SandboxSpec  # noqa: E402
from coderoom.sandboxes.session import open_session  # noqa: E402

BACKENDS = ("local", "docker", "unix_local")
TREE = (
    "mkdir -p d && for i in $(seq 2000); do echo $i > d/f$i; done && ln d/f1 hard && "
    "ln -s d/f2 rel && chmod 755 d/f3"
)


def _cut() -> io.BytesIO:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        info = tarfile.TarInfo("big.bin")
        info.size = 100 * 2**20
        tar.addfile(info, io.BytesIO(bytes(info.size)))
    return io.BytesIO(out.getvalue()[: out.tell() // 2])


def _gzip() -> io.BytesIO:
    return io.BytesIO(gzip.compress(os.urandom(2**20)))


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def _case(backend: str, make: Callable[[], io.IOBase] | None) -> str:
    spec = SandboxSpec(backend=backend, limits=Limits(workspace_size="2G"))
    unconfined = backend == "unix_local"
    if make is None:
        async with open_session(spec, unconfined_no_isolation=unconfined) as first:
            await first.exec(TREE)
            data: io.IOBase = await first.persist_workspace()
    else:
        data = make()
    async with open_session(spec, unconfined_no_isolation=unconfined) as session:
        rss, start = _rss_mib(), time.monotonic()
        with host_temp_peak() as peak:
            try:
                await session.hydrate_workspace(data)
                outcome = "restored"
            except Exception as exc:  # the outcome is the table's content
                reason = getattr(exc, "context", {}).get("reason") or str(exc)
                outcome = f"{type(exc).__name__}: {str(reason)[:60]}"
        seconds = time.monotonic() - start
    return f"{seconds:.2f} s, +{_rss_mib() - rss:.0f} MiB RSS, {peak[0] / 2**20:.0f} MiB temp; {outcome}"


async def main() -> None:
    cases: list[tuple[str, Callable[[], io.IOBase] | None]] = [
        ("2,000 files, links (restore)", None),
        ("10^6 members", lambda: _ManyMembers(10**6)),  # type: ignore[arg-type, return-value]
        ("1 TB claimed, no data", _huge_claim),
        ("100 MB cut in half", _cut),
        ("gzip of random bytes", _gzip),
    ]
    print("| snapshot | " + " | ".join(BACKENDS) + " |")
    print("|---|" + "---|" * len(BACKENDS))
    for label, make in cases:
        cells = [await _case(backend, make) for backend in BACKENDS]
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    asyncio.run(main())
