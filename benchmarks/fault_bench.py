#!/usr/bin/env python3
"""What coderoom does when things go wrong: one real `coderoom run` per fault, measured.

For each fault: the exit code, the time from the fault to exit ("time to give up"), what is
left on the host afterwards (session folders, processes, containers of that run) and what the
run folder holds. Faults: SIGTERM / SIGHUP / SIGINT during a command, SIGTERM during a model
request, two SIGTERMs during the save, SIGKILL (then `coderoom sandbox prune`), and N
concurrent runs without --out (do their folders collide?).

    PYTHONPATH=src:tests python benchmarks/fault_bench.py [--backend local] [--concurrent 16] [--write-docs]

`--write-docs` writes docs/reliability.md (dated, with the machine).
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

from faults.harness import COMMAND, Run, clean_env, events, start_run, tool_started  # noqa: E402
from openai_server import OpenAIServer, Stall, call, say  # noqa: E402

DOCS = ROOT / "docs" / "reliability.md"
NOTE = "mkdir -p output && echo '# partial' > output/note.md"
Row = tuple[str, str, str, str, str]


def _saved(run: Run) -> str:
    record = events(run.run_dir)
    end = record[-1] if record and record[-1]["type"] == "run_end" else None
    if end is None:
        return "no run_end"
    saved = ", ".join(end.get("saved") or []) or "nothing"
    return saved + (f" (incomplete: {end['incomplete']})" if end.get("incomplete") else "")


def _leftovers(run: Run) -> str:
    time.sleep(0.5)
    left = run.leftovers()
    return ", ".join(f"{len(v)} {k}" for k, v in left.items() if v) or "none"


def signal_during(backend: str, stage: str, signums: list[signal.Signals], base: Path) -> Row:
    steps = [call("exec_command", cmd=NOTE)]
    steps += [Stall(60)] if stage == "model request" else [call("exec_command", cmd="sleep 60"), say("never")]
    if stage == "save":
        steps[0] = call("exec_command", cmd=NOTE + " && head -c 200000000 /dev/zero > big.bin")
    with OpenAIServer(steps) as server:
        run = start_run(server, base / f"{stage}-{'-'.join(s.name for s in signums)}", backend, "work")
        if stage == "model request":
            run.wait_for(lambda: len(server.requests) >= 2, "the second model request")
        else:
            run.wait_for_event(tool_started("exec_command", "sleep 60"), "the sleep command")
        time.sleep(0.3)
        sent = time.monotonic()
        for index, signum in enumerate(signums):
            if index:
                time.sleep(0.4)
            run.process.send_signal(signum)
        run.finish()
        took = time.monotonic() - sent
    label = " then ".join(s.name for s in signums) + f" during {stage}"
    return label, str(run.process.returncode), f"{took:.2f} s", _leftovers(run), _saved(run)


def sigkill_then_prune(backend: str, base: Path) -> Row:
    with OpenAIServer([call("exec_command", cmd="sleep 60"), say("never")]) as server:
        run = start_run(server, base / "sigkill", backend, "work")
        run.wait_for_event(tool_started("exec_command", "sleep 60"), "the sleep command")
        sent = time.monotonic()
        run.process.send_signal(signal.SIGKILL)
        run.finish()
        before = _leftovers(run)
        subprocess.run([*COMMAND, "sandbox", "prune"], capture_output=True, env=clean_env(), timeout=120)
        took = time.monotonic() - sent
    return "SIGKILL during command, then prune", str(run.process.returncode), f"{took:.2f} s (with prune)", \
        f"before prune: {before}; after: {_leftovers(run)}", _saved(run)


def concurrent(n: int, base: Path) -> Row:
    cwd = base / "concurrent"
    cwd.mkdir()
    with OpenAIServer([say("done")] * n) as server:
        argv = [*COMMAND, "run", "--model", f"openai-compatible:scripted@{server.url}", "hello"]
        started = time.monotonic()
        runs = [subprocess.Popen(argv, cwd=cwd, env=clean_env(), stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL) for _ in range(n)]
        codes = [p.wait(timeout=300) for p in runs]
        took = time.monotonic() - started
    folders = len(list((cwd / "runs").iterdir()))
    failed = sum(1 for c in codes if c != 0)
    return f"{n} concurrent runs without --out", f"{failed} of {n} non-zero", f"{took:.1f} s for all", \
        "-", f"{folders} distinct run folders"


def table(rows: list[Row]) -> str:
    lines = ["| fault | exit code | time to give up | leftovers | saved |", "|---|---|---|---|---|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="local")
    parser.add_argument("--concurrent", type=int, default=16)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        rows = [
            signal_during(args.backend, "command", [signal.SIGTERM], base),
            signal_during(args.backend, "command", [signal.SIGHUP], base),
            signal_during(args.backend, "command", [signal.SIGINT], base),
            signal_during(args.backend, "model request", [signal.SIGTERM], base),
            signal_during(args.backend, "save", [signal.SIGTERM, signal.SIGTERM], base),
            sigkill_then_prune(args.backend, base),
            concurrent(args.concurrent, base),
        ]
    text = table(rows)
    print(text)
    if args.write_docs:
        import platform

        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d")
        DOCS.write_text(
            f"# Reliability: what a run does when things go wrong\n\nMeasured {stamp} with "
            f"`benchmarks/fault_bench.py --backend {args.backend}` on {platform.platform()} "
            f"({platform.processor() or platform.machine()}), a machine shared with other work.\n\n"
            "A signal (SIGINT, SIGTERM, SIGHUP) stops a run the same way: the workspace is saved "
            "(within `run.SAVE_TIMEOUT_S` = 60 s), the sandbox removed, the record ends with run_end "
            "\"interrupted\" and the signal; exit 130 / 143 / 129. A second signal abandons the save "
            "(no truncated workspace.tar: it is written under a temporary name) and run_end says "
            "\"incomplete\". SIGKILL cannot be handled: Docker containers stop by themselves (init.py "
            "sees its stdin close, or no host attaching within 30 s), and `coderoom sandbox prune` "
            "removes what a dead owner left (leases: pid + start time + boot id).\n\n"
            f"{text}\n"
        )
        print(f"wrote {DOCS}")


if __name__ == "__main__":
    main()
