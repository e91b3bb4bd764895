"""`coderoom sandbox run` through both of its entry points: the fast path (`cli.main`, no typer)
and the typer app, which must agree on every flag, exit code and probe verdict.

Both paths make their `Limits` with the one parser and meet at one seam: `sandbox_run.execute`,
or, on docker's fast path, `plain.run_plain` (`DockerBackend.run_plain`). So the catalogue is
proved on them in three parts, where running all of it through two whole processes per probe
cost twice the sandboxes and the typer app's imports each time:
- `seam_calls`, in-process and without a sandbox: a probe's command line asks the seam for the
  same sandbox (backend, limits, command, workspace, copy-back) on both paths;
- `run_catalogue`: every probe for real through the fast path, the one users take, and
  `REPRESENTATIVES` for real through the typer path too, for what only it runs from the CLI (no
  prestart; on docker, the full session rather than `run_plain`).
"""

from __future__ import annotations

import functools
import subprocess
import sys
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


def probe_argv(backend: str, probe: Probe, tokens: dict[str, str]) -> list[str]:
    """`sandbox run --sandbox BACKEND --timeout T [--limit NAME=VALUE ...] -- ARGV` for `probe`."""
    flags = ["--timeout", str(probe.timeout)]
    for name, value in probe.limits.items():
        flags += ["--limit", f"{name}={value}"]
    return ["sandbox", "run", "--sandbox", backend, *flags, "--", *render(probe, tokens)]


CATEGORIES = ("SEC", "FS", "NET", "PROC", "RES", "KERN", "DEV", "TIME")  # the sandbox's properties


def _representatives() -> list[Probe]:
    """One probe of each category of sandbox property in the catalogue (`CATEGORIES`, its id's
    prefix; ART, PI and AST are attacks that those properties contain): the first in catalogue
    order, or, in a category with probes that set limits, the first of those (so `--limit` flags
    that the typer path converts reach a real sandbox)."""
    chosen: dict[str, Probe] = {}
    for probe in PROBES:
        category = probe.id.split("-")[0]
        if category in CATEGORIES and (category not in chosen or (probe.limits and not chosen[category].limits)):
            chosen[category] = probe
    return list(chosen.values())


REPRESENTATIVES = _representatives()
Runs = dict[str, subprocess.CompletedProcess[str]]  # by probe id


@dataclass(frozen=True)
class CatalogueRuns:
    """The catalogue for real from the command line (`run_catalogue`)."""

    backend: str
    fast: Runs  # every probe, through the fast path
    typer: Runs  # `REPRESENTATIVES`, through the typer app

    def fast_failures(self) -> list[tuple[object, ...]]:
        """The probes the fast path fails."""
        runs = [(probe, self.fast[probe.id]) for probe in PROBES]
        return [
            (probe.id, done.returncode, done.stdout[-200:], done.stderr[-300:])
            for probe, done in runs
            if not probe.passes(self.backend, done.stdout)
        ]

    def typer_differences(self) -> list[tuple[object, ...]]:
        """The representatives the typer path fails, or ends with another exit code than the fast path."""
        runs = [(probe, self.typer[probe.id], self.fast[probe.id]) for probe in REPRESENTATIVES]
        return [
            (probe.id, full.returncode, fast.returncode, full.stdout[-200:], full.stderr[-300:])
            for probe, full, fast in runs
            if not probe.passes(self.backend, full.stdout) or full.returncode != fast.returncode
        ]


def run_catalogue(backend: str, tokens: dict[str, str]) -> CatalogueRuns:
    """Every probe as `probe_argv` through the fast path, and `REPRESENTATIVES` through the typer
    app, as whole processes two at a time (each is its own sandbox, so none sees another; the
    typer ones, the longest, first). No canary may reach any of their outputs."""
    jobs = [(TYPER, probe) for probe in REPRESENTATIVES] + [(FAST, probe) for probe in PROBES]

    def run(job: tuple[list[str], Probe]) -> subprocess.CompletedProcess[str]:
        entry, probe = job
        done = cli(entry, *probe_argv(backend, probe, tokens))
        assert Canaries.MARK not in done.stdout + done.stderr, (probe.id, "fast" if entry is FAST else "typer")
        return done

    with ThreadPoolExecutor(max_workers=2) as pool:
        finished = list(pool.map(run, jobs))
    fast: Runs = {}
    typer: Runs = {}
    for (entry, probe), done in zip(jobs, finished):
        (fast if entry is FAST else typer)[probe.id] = done
    return CatalogueRuns(backend, fast, typer)


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
