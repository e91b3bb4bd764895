"""A run whose sandbox makes two hostile required outputs, a PNG bomb and a 160 MiB CSV, with the
host process's peak RSS before and after: `python3 hostile_outputs_run.py RUN_DIR` prints JSON.

A separate process, so that the peak (VmHWM) belongs to this run alone.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
from pathlib import Path

CSV_BYTES = 160 * 1024**2  # 2.5 times the host growth the test allows (MAX_GROWTH_KIB)
BLOCK_ROWS = 100_000

# runs inside the sandbox: the bomb's IHDR says 30000x30000, the CSV is streamed out in blocks
MAKE_OUTPUTS = f"""
import struct, zlib
def chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
idat = zlib.compress(b"\\0" * 30001 * 64, 9)
header = struct.pack(">IIBBBBB", 30000, 30000, 8, 0, 0, 0, 0)
open("output/bomb.png", "wb").write(b"\\x89PNG\\r\\n\\x1a\\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b""))
block = "".join(f"{{i}},{{i * 0.5}},label{{i % 7}}\\n" for i in range({BLOCK_ROWS}))
with open("output/big.csv", "w") as out:
    out.write("id,value,label\\n")
    written = 0
    while written < {CSV_BYTES}:
        out.write(block)
        written += len(block)
"""


def expected_rows() -> int:
    block = "".join(f"{i},{i * 0.5},label{i % 7}\n" for i in range(BLOCK_ROWS))
    return -(-CSV_BYTES // len(block)) * BLOCK_ROWS


def peak_rss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


async def main(run_dir: Path) -> dict[str, object]:
    from agents.testing import ScriptedModel, assistant_message, function_call

    from coderoom.jobs import build_job
    from coderoom.models import ResolvedModel
    from coderoom.run import run_job

    job = build_job(
        {
            "name": "hostile-outputs",
            "prompt": "make the outputs",
            "outputs": ["output/bomb.png", "output/big.csv"],
            "max_turns": 2,  # one check in the session, one on the host
            "sandbox": {"backend": "local"},
        }
    )
    command = f"mkdir -p output && python3 - <<'EOF'\n{MAKE_OUTPUTS}\nEOF"
    model = ScriptedModel([[function_call("exec_command", {"cmd": command, "yield_time_ms": 120000}, call_id="c1")],
                           [assistant_message("made them")]])  # fmt: skip
    resolved = ResolvedModel(model=model, label="scripted", api="offline", accepts_images=False, tracing_disabled=True)
    before = peak_rss_kib()
    result = await run_job(job, run_dir=run_dir, model=resolved)
    return {
        "peak_rss_kib_before": before,
        "peak_rss_kib_after": peak_rss_kib(),
        "csv_size": (run_dir / "output/big.csv").stat().st_size,
        "status": result.status,
        "checks": [vars(c) for c in result.checks],
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(Path(sys.argv[1])))))
