"""`coderoom sandbox run` through both of its entry points: the fast path (`cli.main`, no typer)
and the typer app, which must agree on every flag, exit code and probe verdict.

Both paths make their `Limits` with the one parser and meet at one seam: `sandbox_run.execute`,
or, on docker's fast path, `plain.run_plain` (`DockerBackend.run_plain`). So the catalogue is
proved on them in three parts, where running all of it through two whole processes per probe
cost twice the sandboxes and the typer app's imports each time:
- `seam_calls`, in-process and without a sandbox: a probe's command line asks the seam for the
  same sandbox (backend, limits, command, workspace, copy-back) on both paths;
- `fast_path_failures`: every probe for real through the fast path, the one users take;
- `probe_verdicts_that_differ` over `REPRESENTATIVES`: a few for real through both paths, for
  what only the typer path runs from the CLI (on docker, the full session rather than `run_plain`).
"""

from __future__ import annotations

import functools
import subprocess
import sys
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from coderoom.sandboxes.limits import Limits

from .probes import PROBES, Canaries, Probe, render

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


def probe_argv(backend: str, probe: Probe, tokens: dict[str, str]) -> list[str]:
    """`sandbox run --sandbox BACKEND --timeout T [--limit NAME=VALUE ...] -- ARGV` for `probe`."""
    flags = ["--timeout", str(probe.timeout)]
    for name, value in probe.limits.items():
        flags += ["--limit", f"{name}={value}"]
    return ["sandbox", "run", "--sandbox", backend, *flags, "--", *render(probe, tokens)]


def _representatives() -> list[Probe]:
    """One probe per category of the catalogue (its id's prefix: SEC, FS, NET, PROC, RES, ART, PI,
    AST, KERN, DEV, TIME): the first in catalogue order, or, in a category with probes that set
    limits, the first of those (so `--limit` flags the typer path converts reach a real sandbox)."""
    chosen: dict[str, Probe] = {}
    for probe in PROBES:
        category = probe.id.split("-")[0]
        if category not in chosen or (probe.limits and not chosen[category].limits):
            chosen[category] = probe
    return list(chosen.values())


REPRESENTATIVES = _representatives()


def probe_verdicts_that_differ(
    backend: str, tokens: dict[str, str], probes: Iterable[Probe] = REPRESENTATIVES
) -> list[tuple[object, ...]]:
    """Each of `probes` as `probe_argv` through both paths: the probes either path fails, or on
    which they disagree (verdict or exit code). No canary may reach either path's output."""
    differ: list[tuple[object, ...]] = []
    for probe in probes:
        fast, full = both(*probe_argv(backend, probe, tokens))
        for name, done in (("fast", fast), ("typer", full)):
            assert Canaries.MARK not in done.stdout + done.stderr, (probe.id, name)
        verdicts = (probe.passes(backend, fast.stdout), probe.passes(backend, full.stdout))
        if verdicts != (True, True) or fast.returncode != full.returncode:
            differ.append((probe.id, verdicts, fast.returncode, full.returncode, fast.stdout[-200:], full.stdout[-200:]))
    return differ


def fast_path_failures(backend: str, tokens: dict[str, str]) -> list[tuple[object, ...]]:
    """Every probe of the catalogue as `probe_argv` through the fast path, two at a time (each its
    own sandbox, as `both` runs its pair): the probes it fails. No canary may reach its output."""

    def run(probe: Probe) -> tuple[Probe, subprocess.CompletedProcess[str]]:
        return probe, cli(FAST, *probe_argv(backend, probe, tokens))

    failed: list[tuple[object, ...]] = []
    with ThreadPoolExecutor(max_workers=2) as pool:
        for probe, done in pool.map(run, PROBES):
            assert Canaries.MARK not in done.stdout + done.stderr, probe.id
            if not probe.passes(backend, done.stdout):
                failed.append((probe.id, done.returncode, done.stdout[-200:], done.stderr[-300:]))
    return failed


@dataclass(frozen=True)
class Asked:
    """What one path asked of the sandbox at the seam."""

    backend: str
    limits: Limits
    packages: tuple[str, ...]
    command: tuple[str, ...]
    workspace: Path | None
    copy_back_all: bool


@dataclass(frozen=True)
class Call:
    """One call of the seam: which (`execute`, or `run_plain` on docker's fast path), what it was
    asked, and whether a backend's `prestart` came with it (the local fast path's)."""

    seam: str
    asked: Asked
    prestart: bool


SEAM_EXIT = 42  # what the replaced seam returns: each path must exit with it


@functools.cache
def _typer_command() -> Any:
    """The click command `app()` builds from the typer app and runs (built once: it does not depend
    on the command line, and building it took most of an in-process run's time)."""
    from typer.main import get_command

    from coderoom.cli import app

    return get_command(app)


def seam_calls(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[Call, Call]:
    """The seam's call when `coderoom ARGV` goes through the fast path (`fast_exit_code`, as
    `cli.main` calls it) and through the typer app (as `app()` runs it), in this process; the seam
    is replaced by a spy, so nothing is started. Each path must make exactly one call and exit
    with the spy's code."""
    from coderoom.cli import sandbox_cmd, sandbox_run
    from coderoom.sandboxes.core import CommandResult
    from coderoom.sandboxes.docker import plain

    assert sandbox_cmd.execute is sandbox_run.execute  # one function, whichever path calls it
    calls: list[Call] = []

    def execute(spec: Any, command: list[str], workspace: Path | None, *, copy_back_all: bool,
                progress: Any, prestart: Any = None) -> int:  # fmt: skip
        environment = getattr(spec, "environment", None)  # the fast path's spec has none
        packages = tuple(environment.packages) if environment is not None else ()
        asked = Asked(spec.backend, spec.limits, packages, tuple(command), workspace, copy_back_all)
        calls.append(Call("execute", asked, prestart is not None))
        return SEAM_EXIT

    def run_plain(limits: Limits, command: list[str], **_: Any) -> CommandResult:
        calls.append(Call("run_plain", Asked("docker", limits, (), tuple(command), None, False), False))
        return CommandResult(SEAM_EXIT, b"", b"")

    monkeypatch.setattr(sandbox_run, "execute", execute)
    monkeypatch.setattr(sandbox_cmd, "execute", execute)
    monkeypatch.setattr(plain, "run_plain", run_plain)
    assert sandbox_run.fast_exit_code(argv) == SEAM_EXIT
    assert len(calls) == 1, calls
    with pytest.raises(SystemExit) as typer_exit:
        _typer_command()(argv, prog_name="coderoom")
    assert typer_exit.value.code == SEAM_EXIT
    assert len(calls) == 2, calls
    return calls[0], calls[1]
