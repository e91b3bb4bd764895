"""Where an allowlist comes from: a job's [sandbox.network], --allow-host and --resolve on `run`
and `sandbox run`, always through the one limits parser; bad settings exit 2 before any run
folder or sandbox exists."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from coderoom.errors import UsageError
from coderoom.jobs import load_job
from coderoom.sandboxes import Limits, SandboxSpec
from coderoom.sandboxes.limits import limits_from_flags, parse_limits, with_allowlist

JOB = """
prompt = "fetch"
[sandbox]
backend = "local"
[sandbox.network]
allow = ["api.test:8080", "*.example.org"]
resolve = {"api.test" = "127.0.0.1"}
[[sandbox.network.secrets]]
host = "api.test"
header = "Authorization"
env = "API_TOKEN"
format = "Bearer {}"
"""


def coderoom(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", **(env or {})}
    return subprocess.run([sys.executable, "-m", "coderoom", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=120)


def test_a_job_files_network_table_becomes_the_egress_limit(tmp_path: Path) -> None:
    (tmp_path / "coderoom.toml").write_text(JOB)
    limits = load_job(tmp_path).sandbox.limits
    assert limits.egress is not None and not limits.network
    assert limits.egress.rule_for("api.test", 8080) and limits.egress.rule_for("a.example.org", 443)
    assert limits.egress.address_for("api.test") == "127.0.0.1"
    secret = limits.egress.secret_for("api.test")
    assert secret is not None and secret.env == "API_TOKEN"


def test_the_spec_round_trips_through_its_plain_form() -> None:
    spec = SandboxSpec.model_validate({"backend": "local", "network": {"allow": ["api.test:8080"]}})
    assert SandboxSpec.model_validate(spec.model_dump(mode="json")).limits == spec.limits


def test_network_true_with_an_allowlist_is_a_usage_error_that_says_why() -> None:
    base = with_allowlist(Limits(), ["api.test"], [])
    with pytest.raises(UsageError, match="network = true means unrestricted network, and an allowlist"):
        limits_from_flags([], base=base, network=True)


def test_the_allowlist_is_not_a_limit_flag() -> None:
    with pytest.raises(UsageError, match="set with --allow-host and --resolve"):
        limits_from_flags(["egress=api.test"])


def test_budget_limits_parse_like_the_others() -> None:
    limits = parse_limits({"egress_bytes": "50M", "egress_connections": "20"}, source="--limit")
    assert (limits.egress_bytes, limits.egress_connections) == (50 * 1024**2, 20)
    with pytest.raises(UsageError, match="egress_connections"):
        parse_limits({"egress_connections": 0}, source="--limit")


@pytest.mark.parametrize(
    "flags, said",
    [
        (["--allow-host", "bad host"], "is not a host name"),
        (["--allow-host", "api.test:99999"], "port must be a number"),
        (["--allow-host", "api.test", "--resolve", "api.test"], "HOST=ADDRESS"),
        (["--allow-host", "api.test", "--resolve", "api.test=localhost"], "not an IP address"),
        (["--allow-host", "api.test", "--network"], "network = true means unrestricted"),
    ],
)
def test_bad_allowlist_flags_exit_2_with_one_clear_line_before_anything_is_made(
    tmp_path: Path, flags: list[str], said: str
) -> None:
    sandbox = coderoom("sandbox", "run", *flags, "--", "true", cwd=tmp_path)
    assert sandbox.returncode == 2 and said in sandbox.stderr, sandbox.stderr
    run = coderoom("run", "--model", "offline", "--out", str(tmp_path / "out"), *flags, "hello", cwd=tmp_path)
    assert run.returncode == 2 and said in run.stderr + run.stdout, run.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "runs").exists()


def test_an_allowlist_on_a_docker_engine_elsewhere_exits_2_before_anything_is_made(tmp_path: Path) -> None:
    # the proxy's socket is a bind mount of a host folder: only an engine on this machine sees
    # it; the refusal comes before any connection to the engine (nothing listens on port 9)
    flags = ["--allow-host", "api.test", "--sandbox", "docker"]
    env = {"DOCKER_HOST": "tcp://127.0.0.1:9"}
    sandbox = coderoom("sandbox", "run", *flags, "--", "true", cwd=tmp_path, env=env)
    assert sandbox.returncode == 2 and "needs a Docker engine on this machine" in sandbox.stderr, sandbox.stderr
    assert not (tmp_path / "runs").exists()


def test_a_bad_network_table_in_a_job_file_names_the_table(tmp_path: Path) -> None:
    (tmp_path / "coderoom.toml").write_text('prompt = "x"\n[sandbox.network]\nallow = ["ok.test"]\ndns = true\n')
    run = coderoom("run", "--model", "offline", str(tmp_path), cwd=tmp_path)
    assert run.returncode == 2
    assert "coderoom.toml [sandbox.network] 'dns': not a network setting" in run.stderr + run.stdout


def test_serve_and_mcp_take_the_allowlist_and_mcp_keeps_it_in_the_client_config(tmp_path: Path) -> None:
    for command in ("serve", "mcp"):
        bad = coderoom(command, "--allow-host", "api.test", "--resolve", "api.test=nope", cwd=tmp_path)
        assert bad.returncode == 2 and "not an IP address" in bad.stderr, bad.stderr
    config = coderoom("mcp", "--allow-host", "api.test:8080", "--resolve", "api.test=127.0.0.1", "--print-config", cwd=tmp_path)
    assert '"--allow-host",\n        "api.test:8080"' in config.stdout
    assert '"--resolve",\n        "api.test=127.0.0.1"' in config.stdout
