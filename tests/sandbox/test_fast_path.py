"""`coderoom sandbox run`'s fast path (no typer, rich or pydantic) is the typer command with the
same sandbox: the same limits from the same flags, the same sandbox asked for by every probe of
the attack catalogue (each of which the fast path passes, and a probe of each category both
paths: see `both_paths`), the same exit codes, and the same words for usage errors (an option's
are typer's: the fast path steps aside for any form it does not take exactly as typer would; a
limit's are the one parser's, `sandboxes.limits.parse_limits`, on both paths)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from backends import require_backend
from coderoom.cli.sandbox_cmd import _spec
from coderoom.cli.sandbox_run import OPTIONS, parse_plain, plain_spec
from coderoom.errors import UsageError
from coderoom.sandboxes.limits import Limits

from .both_paths import FAST, TYPER, Asked, CatalogueRuns, cli, probe_argv, run_catalogue, seam_calls
from .probes import PROBES, Canaries, Probe, render




@pytest.mark.parametrize(
    "flags",
    [
        [],
        ["--memory", "512M", "--timeout", "2.5", "--pids", "64"],
        ["--memory=1G", "--timeout=30", "--network", "--no-network"],
        ["--network"],
        ["--pids", "1_000", "--timeout", "1e2", "--sandbox", "local"],
        ["--limit", "workspace_size=5M", "--limit=cpus=0.5", "--limit", "file_size=1M", "--memory", "1G"],
        ["--limit", "memory=2G", "--memory", "1G", "--limit", "network=true", "--no-network"],
    ],
)
def test_the_fast_path_reads_the_flags_as_typer_and_limits_do(flags: list[str]) -> None:
    parsed = parse_plain([*flags, "--", "true"])
    assert parsed is not None
    values, command = parsed
    assert command == ["true"]
    fast = plain_spec(values)
    full = _spec(values)
    assert fast.backend == full.backend
    assert fast.limits == full.limits


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["--bogus", "--", "true"],
        ["true"],  # no `--`: typer parses it (and its options)
        ["--memory", "--", "true"],
        ["--timeout", "-1", "--", "true"],
        ["--pids", "x", "--", "true"],
        ["--limit", "--", "true"],
        ["--network=yes", "--", "true"],
        ["--workspace", "/nonexistent", "--", "true"],
        ["--"],
    ],
)
def test_other_forms_are_left_to_typer(args: list[str]) -> None:
    assert parse_plain(args) is None


@pytest.mark.parametrize(
    "args",
    [
        ["--memory", "1", "--", "true"],  # under the minimum
        ["--memory", "lots", "--", "true"],
        ["--timeout", "0", "--", "true"],
        ["--timeout", "inf", "--", "true"],
        ["--pids", "0", "--", "true"],
        ["--limit", "tmp_size=1", "--", "true"],
        ["--limit", "rootfs=1G", "--", "true"],
        ["--limit", "pids", "--", "true"],
    ],
)
def test_a_bad_limit_is_refused_by_the_one_parser_on_both_paths(args: list[str]) -> None:
    parsed = parse_plain(args)
    assert parsed is not None
    with pytest.raises(UsageError) as fast:
        plain_spec(parsed[0])
    with pytest.raises(UsageError) as full:
        _spec(parsed[0])
    assert fast.value.message == full.value.message
    assert fast.value.message.startswith("--limit ")


@pytest.mark.parametrize(
    "args",
    [
        ["--bogus", "--", "true"],
        ["--memory", "1", "--", "true"],
        ["--memory", "lots", "--", "true"],
        ["--limit", "memory=1", "--", "true"],
        ["--limit", "bogus=1", "--", "true"],
        ["--timeout", "inf", "--", "true"],
        ["--timeout", "x", "--", "true"],
        ["--sandbox", "nope", "--", "true"],
        ["--sandbox", "unix_local", "--", "true"],
        [],
    ],
)
def test_usage_errors_are_the_same_words_and_exit_2(args: list[str]) -> None:
    fast, full = cli(FAST, "sandbox", "run", *args), cli(TYPER, "sandbox", "run", *args)
    assert (fast.returncode, fast.stdout, fast.stderr) == (full.returncode, full.stdout, full.stderr)
    assert fast.returncode == 2


def test_every_option_of_the_table_is_typers() -> None:
    help_text = cli(TYPER, "sandbox", "run", "--help").stdout
    for option in OPTIONS:
        assert option.flag in help_text


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    require_backend("local")
    with Canaries(tmp_path_factory.mktemp("canaries")) as planted:
        yield planted


@pytest.mark.parametrize("probe", PROBES, ids=[probe.id for probe in PROBES])
def test_each_probe_asks_both_paths_for_the_sandbox_the_catalogue_proves(
    probe: Probe, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe's command line (`--timeout`, its limits as `--limit NAME=VALUE`, `-- ARGV`) reaches
    `execute` with the same sandbox through both entry points, in this process with `execute`
    replaced (`both_paths.seam_calls`: nothing is started, so every probe costs milliseconds): the
    limits `run_probe` gives the probe in test_attack_catalogue, its argv whole, no workspace;
    and the fast path hands over the local backend's prestart. The canaries' values do not matter
    here: everything after `--` is the command, compared whole."""
    fast, full = seam_calls(probe_argv("local", probe, {}), monkeypatch)
    assert (fast.seam, fast.prestart, full.seam) == ("execute", True, "execute")
    limits = Limits(timeout=probe.timeout, **probe.limits)  # type: ignore[arg-type]
    assert fast.asked == full.asked == Asked("local", limits, (), tuple(render(probe, {})), None, False)


@pytest.fixture(scope="module")
def catalogue(tokens: dict[str, str]) -> CatalogueRuns:
    """Every probe for real through the fast path and a probe of each category through the typer
    path too, in one go (`both_paths.run_catalogue`)."""
    return run_catalogue("local", tokens)


@pytest.mark.slow
def test_every_probe_passes_through_the_fast_path(catalogue: CatalogueRuns) -> None:
    """Each probe of the catalogue for real as `sandbox run -- ARGV` with its limits as flags,
    through the entry point users take (`cli.main`: the fast path, its prestarted sandbox
    included). The typer path asks `execute` for the same sandbox (the test above); what it runs
    for real on its own is the next test's."""
    assert catalogue.fast_failures() == []


@pytest.mark.slow
def test_a_probe_of_each_category_has_the_same_verdict_and_exit_code_on_the_typer_path(
    catalogue: CatalogueRuns,
) -> None:
    """`both_paths.REPRESENTATIVES` (one per category of sandbox property, by the rule in its
    docstring) for real through the typer app as well: its own sandbox start (no prestart) from
    the CLI, its output and exit code. Not all 65 (each paid the typer app's imports): the typer
    path asks for the same sandbox as the fast path for every probe (the test above), and each
    probe's sandbox is proved on the session path by test_attack_catalogue."""
    assert catalogue.typer_differences() == []


@pytest.mark.parametrize(
    "argv, code",
    [
        (["--", "sh", "-c", "exit 7"], 7),
        (["--timeout", "1", "--", "sleep", "30"], 124),
        (["--", "sh", "-c", "kill -9 $$"], 137),
        (["--", "no-such-command-here"], 127),
    ],
)
def test_exit_codes_are_the_same(argv: list[str], code: int) -> None:
    require_backend("local")
    fast, full = cli(FAST, "sandbox", "run", *argv), cli(TYPER, "sandbox", "run", *argv)
    assert fast.returncode == full.returncode == code, (fast.stderr, full.stderr)
    assert fast.stdout == full.stdout


def test_a_prestarted_sandbox_never_used_leaves_nothing_behind() -> None:
    """`prestart` starts bwrap before asyncio loads; abandoned (an error or a signal before the
    event loop), its processes, memory cgroup and folder go."""
    from types import SimpleNamespace

    from coderoom.sandboxes.limits import Limits
    from coderoom.sandboxes.local import backend, host_dir

    require_backend("local")
    early = backend.prestart(SimpleNamespace(backend="local", limits=Limits()))  # type: ignore[arg-type]
    assert early is not None
    plan, started = early._parts
    record = plan.host_dir / host_dir.CGROUP_FILE
    group = Path(record.read_text()) if record.exists() else None
    pid = started.popen.pid
    early.abandon()
    assert started.popen.returncode is not None and not Path(f"/proc/{pid}").exists()
    assert not plan.host_dir.exists()
    assert group is None or not group.exists()
