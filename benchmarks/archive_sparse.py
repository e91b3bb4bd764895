"""The sparse-file archive attack (issue 10 class 4): host temp bytes and time to archive a
workspace holding `truncate -s SIZE sparse` (default 4G). `python3 benchmarks/archive_sparse.py 50G`."""
import asyncio, sys, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from sandbox.host_temp import host_temp_peak  # noqa: E402
from coderoom.sandboxes import Limits, SandboxSpec
from coderoom.sandboxes.session import open_session

SIZE = sys.argv[1] if len(sys.argv) > 1 else "4G"

async def main():
    spec = SandboxSpec(backend="docker", limits=Limits(workspace_size="64M", file_size="64G", timeout=30))
    async with open_session(spec) as s:
        r = await s.exec(f"truncate -s {SIZE} sparse && ls -ls sparse")
        print(r.stdout.decode(), r.stderr.decode())
        start = time.monotonic()
        with host_temp_peak() as peak:
            try:
                a = await s.persist_workspace()
                print("archived", len(a.read()))
            except Exception as e:
                print("refused:", type(e).__name__, e.__cause__ or e)
        print(f"time {time.monotonic()-start:.1f} s, peak host temp {peak[0]/2**20:.1f} MiB")
asyncio.run(main())
