"""`coderoom sandbox run` through both of its entry points: the fast path (`cli.main`, no typer)
and the typer app, which must agree on every flag, exit code and probe verdict."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from .probes import PROBES, Canaries, render

FAST = [sys.executable, "-c", "from coderoom.cli import main; main()"]
TYPER = [sys.executable, "-c", "from coderoom.cli import app; app()"]  # the typer app, always


def cli(entry: list[str], *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*entry, *args], capture_output=True, text=True, timeout=timeout)


def both(*args: str) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """The same command through both paths at once: each is its own sandbox, so neither sees the
    other, and the pair takes the time of one."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        fast, full = pool.submit(cli, FAST, *args), pool.submit(cli, TYPER, *args)
        return fast.result(), full.result()


def probe_verdicts_that_differ(backend: str, tokens: dict[str, str]) -> list[tuple[object, ...]]:
    """Each probe of the catalogue as `sandbox run --sandbox BACKEND [--timeout, --limit NAME=VALUE
    flags] -- ARGV` through both paths: the probes either path fails, or on which they disagree
    (verdict or exit code). No canary may reach either path's output."""
    differ: list[tuple[object, ...]] = []
    for probe in PROBES:
        flags = ["--timeout", str(probe.timeout)]
        for name, value in probe.limits.items():
            flags += ["--limit", f"{name}={value}"]
        fast, full = both("sandbox", "run", "--sandbox", backend, *flags, "--", *render(probe, tokens))
        for name, done in (("fast", fast), ("typer", full)):
            assert Canaries.MARK not in done.stdout + done.stderr, (probe.id, name)
        verdicts = (probe.passes(backend, fast.stdout), probe.passes(backend, full.stdout))
        if verdicts != (True, True) or fast.returncode != full.returncode:
            differ.append((probe.id, verdicts, fast.returncode, full.returncode, fast.stdout[-200:], full.stdout[-200:]))
    return differ
