"""The sparse-file archive attack (issue 10 class 4): host temp bytes and time to archive a
workspace holding `truncate -s SIZE sparse` (default 4G). `python3 benchmarks/archive_sparse.py 50G`."""
import asyncio, os, sys, tempfile, threading, time
from coderoom.sandboxes import Limits, SandboxSpec
from coderoom.sandboxes.session import open_session

SIZE = sys.argv[1] if len(sys.argv) > 1 else "4G"

def peak_temp(stop, out):
    tmp = tempfile.gettempdir()
    while not stop.is_set():
        used = 0
        for fd in os.listdir("/proc/self/fd"):
            try:
                if os.readlink(f"/proc/self/fd/{fd}").startswith(tmp):
                    used += os.fstat(int(fd)).st_blocks * 512
            except OSError:
                pass
        out[0] = max(out[0], used)
        time.sleep(0.01)

async def main():
    spec = SandboxSpec(backend="docker", limits=Limits(workspace_size="64M", file_size="64G", timeout=30))
    async with open_session(spec) as s:
        r = await s.exec(f"truncate -s {SIZE} sparse && ls -ls sparse")
        print(r.stdout.decode(), r.stderr.decode())
        stop, peak = threading.Event(), [0]
        t = threading.Thread(target=peak_temp, args=(stop, peak)); t.start()
        start = time.monotonic()
        try:
            a = await s.persist_workspace()
            print("archived", a.read().__len__())
        except Exception as e:
            print("refused:", type(e).__name__, str(e)[:300])
        finally:
            stop.set(); t.join()
        print(f"time {time.monotonic()-start:.1f} s, peak host temp {peak[0]/2**20:.1f} MiB")
asyncio.run(main())
