"""`coderoom sandbox run`: its options in one table, and its fast path, with no typer or pydantic.

Importing typer, rich and pydantic cost about 80 ms of a whole `sandbox run -- true` (about 270
ms here) and a one-command local sandbox about 40. So the entry point (`cli.main`) first offers
the command line to `fast_exit_code`: in its plain form (known options, each value one the
typer command would take the same way, then `--` and the command) it runs here. Any other
form, `--help`, an option with a value that starts with `-` or that typer would not convert,
`--workspace`, or a backend that needs the full spec (`base.SandboxBackend.plain_spec`) goes
through the typer command (`sandbox_cmd`), which reads the same `OPTIONS`. A backend with
`run_plain` (docker) runs the command itself, without asyncio, or hands it to the typer command
when it says so before making anything. Help and option
errors are therefore typer's own; both paths make their `Limits` with `limits_of` (the one
parser, `sandboxes.limits`, so a bad limit has the same words), and both run `execute`.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import IO, TYPE_CHECKING, Any

from .. import signal_masks
from ..errors import CoderoomError
from ..hostile.text import terminal_safe, terminal_safe_bytes
from ..sandboxes.defaults import default_backend_name
from ..sandboxes.flags import SandboxFlags
from ..sandboxes.limits import FLAG_HELP, Limits
from ..sandboxes.requirements import PACKAGE_HELP
from ..sandboxes.registry import backend_names, get_backend, prepare_backend
from .errors import show

if TYPE_CHECKING:
    from ..sandboxes.spec import SandboxSpec


class Option:
    """One option: `kind` is str, int, float, bool (a `--x/--no-x` flag), list (a repeatable
    string option) or Path (a directory that must exist); `default` and `help` may be callables,
    called when the typer command is built."""

    __slots__ = ("name", "kind", "default", "help", "typer_extra")

    def __init__(
        self, name: str, kind: type, default: Any, help: str | Callable[[], str], **typer_extra: Any
    ) -> None:
        self.name, self.kind, self.default, self.help, self.typer_extra = name, kind, default, help, typer_extra

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def value(self, attribute: str) -> Any:
        found = getattr(self, attribute)
        return found() if callable(found) and not isinstance(found, type) else found


OPTIONS = (
    Option("sandbox", str, default_backend_name, lambda: f"backend: {' | '.join(backend_names())}"),
    Option("workspace", Path, None, "copy DIR in, and the workspace back out", file_okay=False, exists=True),
    Option(
        "copy_back_all", bool, False,
        "also copy back VCS, shell and editor hook files (.git/, .envrc, ...): they can run code on this host",
    ),  # fmt: skip
    Option("network", bool, None, "allow network access"),
    Option("memory", str, None, "memory limit, e.g. 512M"),
    Option("timeout", float, None, "wall-clock seconds"),
    Option("pids", int, None, "processes and threads"),
    Option("limit", list, lambda: [], FLAG_HELP),
    Option("package", list, lambda: [], PACKAGE_HELP),
    Option("allow_host", list, lambda: [], "HOST[:PORT] the sandbox may reach through the host's proxy (repeatable)"),
    Option("resolve", list, lambda: [], "HOST=ADDRESS: the address the proxy uses for HOST (repeatable)"),
)
SHORT_FORMS = ("network", "memory", "timeout", "pids")  # options that set one limit each
COMMAND_HELP = "the command and its arguments (after --)"
SUMMARY = "Run one command in a fresh sandbox; exit with its status (124 timeout, 137 killed)."


def parse_plain(argv: list[str]) -> tuple[dict[str, Any], list[str]] | None:
    """The option values and the command of `sandbox run ARGV` in its plain form, converted as
    typer converts them (`int(...)`, `float(...)`); None for any other form (typer decides)."""
    if "--" not in argv:
        return None
    split = argv.index("--")
    head, command = argv[:split], argv[split + 1 :]
    if not command:
        return None
    by_flag = {option.flag: option for option in OPTIONS}
    by_flag.update({f"--no-{option.flag[2:]}": option for option in OPTIONS if option.kind is bool})
    values = {option.name: option.value("default") for option in OPTIONS}
    tokens = iter(head)
    for token in tokens:
        flag, inline, text = token.partition("=")
        option = by_flag.get(flag)
        if option is None or option.kind is Path:
            return None
        if option.kind is bool:
            if inline:
                return None
            values[option.name] = not flag.startswith("--no-")
            continue
        if not inline:
            following = next(tokens, None)
            if following is None:
                return None
            text = following
        if text.startswith("-"):
            return None
        if option.kind is list:
            values[option.name].append(text)
            continue
        try:
            values[option.name] = option.kind(text)
        except ValueError:
            return None
    return values, command


def flags_of(values: dict[str, Any]) -> SandboxFlags:
    """`sandbox run`'s sandbox options, on both paths, for the one parser (`sandboxes.flags`)."""
    short_forms = {name: values[name] for name in SHORT_FORMS}
    return SandboxFlags(values["limit"], short_forms, values["allow_host"], values["resolve"], values["package"])


def limits_of(values: dict[str, Any]) -> Limits:
    """The limits `sandbox run`'s options ask for, on both paths (a bad one: UsageError)."""
    return flags_of(values).limits()


def plain_spec(values: dict[str, Any]) -> SimpleNamespace:
    """A pydantic-free spec: the backend's name and the limits (see `base.SandboxBackend.plain_spec`)."""
    return SimpleNamespace(backend=values["sandbox"], limits=limits_of(values))


def fast_exit_code(argv: list[str]) -> int | None:
    """Run `coderoom ARGV` here if it is a plain `sandbox run` (see the module docstring), and
    return its exit code; None when the typer app must take it."""
    if argv[:2] != ["sandbox", "run"]:
        return None
    parsed = parse_plain(argv[2:])
    if parsed is None:
        return None
    values, command = parsed
    if values["package"]:  # a package environment needs the full spec (pydantic)
        return None
    try:
        spec = plain_spec(values)
        backend = get_backend(spec.backend)
        if hasattr(backend, "run_plain"):
            with _signals_raise():
                result = backend.run_plain(spec, command)
            if result is None:
                return None
            _write(sys.stdout.buffer, result.stdout)
            _write(sys.stderr.buffer, result.stderr)
            return int(result.exit_code)
        if not getattr(backend, "plain_spec", False):
            return None
        with _signals_raise():  # outside the event loop, which handles them itself (see `execute`)
            prestart = (lambda: backend.prestart(spec)) if hasattr(backend, "prestart") else None
            return execute(spec, command, None, copy_back_all=False, progress=_progress, prestart=prestart)
    except _Signalled as signalled:  # the same words and code as `interrupts.Interrupted`
        return show(f"interrupted by {signal.Signals(signalled.signum).name}", 128 + signalled.signum)
    except CoderoomError as exc:
        return show(exc.message, exc.exit_code)


def execute(
    spec: SandboxSpec | SimpleNamespace,
    command: list[str],
    workspace: Path | None,
    *,
    copy_back_all: bool,
    progress: Callable[[str], None],
    prestart: Callable[[], Any] | None = None,
) -> int:
    """Run `command` in a fresh sandbox, write its output, and return its exit code. A signal
    ends it with `interrupts.Interrupted` once the sandbox is gone (see `run_interruptible`).
    `prestart`: a backend's `prestart(spec)`, which starts the sandbox before asyncio is loaded;
    a signal during it waits until what it made is ours to remove (`signal_masks.held`)."""
    early = None
    try:
        if prestart is not None:
            with signal_masks.held():
                early = prestart()
        import asyncio

        from ..interrupts import run_interruptible
        from ..sandboxes.oneshot import run_once

        prepare_backend(spec, progress)  # type: ignore[arg-type]
        # SIGINT/SIGTERM/SIGHUP: the sandbox is closed and removed, then `Interrupted` (exit 128+N)
        once = run_once(spec, command, workspace, copy_back_all=copy_back_all,  # type: ignore[arg-type]
                        start=early.finish if early is not None else None)  # fmt: skip
        result = asyncio.run(run_interruptible(once))
        _write(sys.stdout.buffer, result.stdout)
        _write(sys.stderr.buffer, result.stderr)
        for line in result.egress_refused:  # what the sandbox asked for came from it: hostile text
            sys.stderr.write(terminal_safe(f"coderoom: {line}") + "\n")
        if result.copied_out is not None:
            from ..hostile.exits import OVERRIDABLE

            for name, reason in result.copied_out.refused:
                sys.stderr.write(terminal_safe(f"coderoom: not copied out: {name!r}: {reason}") + "\n")
            if any(reason in OVERRIDABLE for _, reason in result.copied_out.refused):
                sys.stderr.write("coderoom: --copy-back-all copies hook files too\n")
        return result.exit_code
    finally:
        if early is not None:  # nothing if the sandbox was handed out (run_once closed it); a
            with signal_masks.held():  # second signal (a double Ctrl-C) must not cut the removal short
                early.abandon()


class _Signalled(BaseException):
    def __init__(self, signum: int) -> None:
        self.signum = signum


def _raise_signalled(signum: int, _frame: object) -> None:
    raise _Signalled(signum)


@contextmanager
def _signals_raise() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP raise `_Signalled` here, so a sandbox started before the event
    loop runs (`prestart`) is removed; `interrupts.run_interruptible` handles them in the loop."""
    previous = {signum: signal.signal(signum, _raise_signalled) for signum in signal_masks.STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _progress(line: str) -> None:
    sys.stderr.write(f"coderoom: {line}\n")
    sys.stderr.flush()


def _write(stream: IO[bytes], data: bytes) -> None:
    """Sandbox output is hostile: on a terminal, escape control sequences (catalogue RES-14)."""
    if stream.isatty():
        data = terminal_safe_bytes(data)
    stream.write(data)
    stream.flush()
