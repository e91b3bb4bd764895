"""`coderoom sandbox run --sandbox docker`'s fast path (`sandboxes.docker.plain`: the engine's
socket, no docker-py, no asyncio) is the full path's sandbox: the same create request, the same
sandbox asked for by every probe of the attack catalogue (each of which it passes, and a probe of
each category both paths: see `both_paths`), the same exit codes, nothing left behind, and a
signal ends it with 128+N once the container is gone. Forms it does not run the same way are the
full path's before anything is made."""

from __future__ import annotations

import asyncio
import os
import signal
import struct
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from backends import require_backend
from coderoom.sandboxes.docker import plain, request
from coderoom.sandboxes.docker.engine import DEFAULT_SOCKET, Engine, EngineError, socket_path
from coderoom.sandboxes.docker.frames import Lines, frames, line_bound
from coderoom.sandboxes.docker.labels import CREATED_LABEL, HOST_PID_LABEL, LABEL
from coderoom.sandboxes.limits import Limits

from .both_paths import FAST, TYPER, Asked, CatalogueRuns, cli, probe_argv, run_catalogue, seam_calls
from .probes import PROBES, Canaries, Probe, render

DOCKER_RUN = ["sandbox", "run", "--sandbox", "docker"]



def _containers_of(pid: int) -> list[str]:
    """Ids of coderoom's containers (running or not) that the process `pid` made."""
    done = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={LABEL}=1", "--filter", f"label={HOST_PID_LABEL}={pid}"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return done.stdout.split()


@pytest.fixture()
def docker() -> None:
    require_backend("docker")


def test_both_paths_post_the_same_create_request(docker: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """One function (`request.create_request`) makes the container of both paths: the body the
    fast path posts to the engine equals the one docker-py posts for the full path."""
    from docker.api.client import APIClient

    from coderoom.sandboxes.oneshot import run_once
    from coderoom.sandboxes.spec import SandboxSpec

    session = uuid.UUID(int=7)
    monkeypatch.setattr(request, "new_session_hex", lambda: session.hex)
    limits = dict(memory="768M", pids=99, timeout=20, cpus=0.5, workspace_size="64M", file_size="8M")
    posted: dict[str, tuple[str, dict[str, Any]]] = {}
    fast_call, full_create = Engine.call, APIClient.create_container_from_config

    def fast_recorded(self: Engine, method: str, path: str, body: Any = None) -> Any:
        if path.startswith("/containers/create"):
            posted["fast"] = (path.split("name=", 1)[1], body)
        return fast_call(self, method, path, body)

    def full_recorded(self: APIClient, config: dict[str, Any], name: str | None = None, **extra: Any) -> Any:
        posted["full"] = (str(name), config)
        return full_create(self, config, name=name, **extra)

    monkeypatch.setattr(Engine, "call", fast_recorded)
    monkeypatch.setattr(APIClient, "create_container_from_config", full_recorded)
    fast = plain.run_plain(Limits(**limits), ["true"])  # type: ignore[arg-type]
    spec = SandboxSpec(backend="docker", limits=Limits(**limits))  # type: ignore[arg-type]
    full = asyncio.run(run_once(spec, ["true"], None))
    assert fast is not None and fast.exit_code == full.exit_code == 0
    for _, body in posted.values():
        assert body["Labels"].pop(CREATED_LABEL)  # the second it was made at
    assert posted["fast"] == posted["full"]
    name, body = posted["fast"]
    assert name == f"coderoom-{session.hex[:12]}"
    host = body["HostConfig"]
    assert (body["User"], host["ReadonlyRootfs"], host["CapDrop"], host["NetworkMode"]) == ("1000:1000", True, ["ALL"], "none")
    assert (host["Memory"], host["PidsLimit"], host["NanoCpus"]) == (768 * 1024**2, 99, 500_000_000)


@pytest.mark.parametrize(
    "argv, code",
    [
        (["--", "sh", "-c", "echo out; echo err >&2; exit 7"], 7),
        (["--timeout", "1", "--", "sleep", "30"], 124),
        (["--", "sh", "-c", "kill -9 $$"], 137),
        (["--", "no-such-command-here"], 127),
        (["--memory", "256M", "--", "python3", "-c", "b = bytearray(600 * 1024**2)"], 137),
    ],
    ids=["exit-7", "timeout", "killed", "no-command", "oom"],
)
def test_exit_codes_and_output_are_the_same_on_both_paths(docker: None, argv: list[str], code: int) -> None:
    fast, full = cli(FAST, *DOCKER_RUN, *argv), cli(TYPER, *DOCKER_RUN, *argv)
    assert fast.returncode == full.returncode == code, (fast.stderr, full.stderr)
    assert (fast.stdout, fast.stderr) == (full.stdout, full.stderr)


@pytest.mark.parametrize(
    "signum, after",
    [(signal.SIGINT, 0.0), (signal.SIGTERM, 0.0), (signal.SIGTERM, 0.05), (signal.SIGHUP, 0.5)],
)
def test_a_signal_removes_the_container_and_exits_128_plus_n(docker: None, signum: int, after: float) -> None:
    """Whether the container was just created, is starting or runs the command (`after` seconds
    after it is seen). A signal in the middle of the start call left the engine connection
    mid-request, and the removal failed (exit 1) before `Engine.call` dropped such a connection."""
    process = subprocess.Popen([*FAST, *DOCKER_RUN, "--", "sleep", "60"], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not _containers_of(process.pid):
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        time.sleep(after)
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 128 + signum, stderr
    assert stderr.strip() == f"coderoom: error: interrupted by {signal.Signals(signum).name}"
    assert _containers_of(process.pid) == []


def test_a_call_cut_short_leaves_the_engine_usable(docker: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A signal's exception in the middle of a call (the request sent, no answer read) must not
    leave the connection mid-request: the removal that follows is a call on the same Engine."""
    from coderoom.sandboxes.docker import engine as engine_module

    engine = Engine(DEFAULT_SOCKET if socket_path(os.environ) is None else str(socket_path(os.environ)))
    real = engine_module._Answers.read

    def interrupted(self: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(engine_module._Answers, "read", real)
        raise KeyboardInterrupt

    monkeypatch.setattr(engine_module._Answers, "read", interrupted)
    with pytest.raises(KeyboardInterrupt):
        engine.call("GET", "/version")
    assert "Arch" in engine.call("GET", "/version")
    engine.close()


def test_an_answer_left_unread_is_never_read_as_the_next_calls(docker: None) -> None:
    """`send` lets the engine work while the caller loads code (`plain` sends GET /version first);
    if the caller never reads that answer (a signal came in between), the next call must not take
    it for its own: it goes on a new connection."""
    engine = Engine(DEFAULT_SOCKET if socket_path(os.environ) is None else str(socket_path(os.environ)))
    try:
        assert "Arch" in engine.send("GET", "/version")()
        engine.send("GET", "/containers/coderoom-no-such-container/json")  # a 404, never read
        assert "Arch" in engine.call("GET", "/version")
    finally:
        engine.close()


def test_answers_of_either_framing_follow_each_other_on_one_connection(docker: None) -> None:
    """The engine sends a long answer chunked (GET /info) and a short one with its length
    (GET /version), an error with its message; `Engine` reads each whole, and the next call goes
    on the same connection."""
    engine = Engine(DEFAULT_SOCKET if socket_path(os.environ) is None else str(socket_path(os.environ)))
    try:
        for _ in range(2):
            assert "ServerVersion" in engine.call("GET", "/info")
            assert "Arch" in engine.call("GET", "/version")
            with pytest.raises(EngineError) as refused:
                engine.call("GET", "/containers/coderoom-no-such-container/json")
            assert refused.value.status == 404 and "coderoom-no-such-container" in refused.value.message
    finally:
        engine.close()


def test_nothing_is_left_behind(docker: None) -> None:
    done = subprocess.Popen([*FAST, *DOCKER_RUN, "--", "true"])
    assert done.wait(timeout=120) == 0
    assert _containers_of(done.pid) == []


def test_forms_it_does_not_run_the_same_way_go_to_the_full_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """None, before anything is made: network on (the session network and its routes), an engine
    docker-py alone speaks to, one that does not answer, no `docker` package."""
    assert plain.run_plain(Limits(network=True), ["true"]) is None
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    assert plain.run_plain(Limits(), ["true"]) is None
    monkeypatch.setattr(plain, "_has_docker_py", lambda: False)
    monkeypatch.delenv("DOCKER_HOST")
    assert plain.run_plain(Limits(), ["true"]) is None


def test_a_missing_image_is_left_to_the_full_path_which_builds_it(docker: None) -> None:
    assert plain.run_plain(Limits(), ["true"], image="coderoom-no-such-image:none") is None


def test_a_malformed_reply_is_a_sandbox_failure_on_both_paths() -> None:
    """init.py shares the sandbox's uid: its reply is read as hostile by the one reader."""
    from coderoom.errors import SandboxFailed
    from coderoom.sandboxes.docker.request import command_result

    for reply in ({"code": "x", "out": "", "err": ""}, {"code": 0}, {"code": 0, "out": "!", "err": None}):
        with pytest.raises(SandboxFailed, match="malformed reply"):
            command_result(reply, timeout=1.0, limits=Limits())


def test_the_engine_socket_is_docker_pys() -> None:
    assert socket_path({}) == DEFAULT_SOCKET
    assert socket_path({"DOCKER_HOST": "unix:///run/user/1000/docker.sock"}) == "/run/user/1000/docker.sock"
    for host in ("tcp://127.0.0.1:2375", "ssh://me@host", "npipe:////./pipe/docker_engine", "unix://"):
        assert socket_path({"DOCKER_HOST": host}) is None
    assert socket_path({"DOCKER_HOST": "unix:///x.sock", "DOCKER_TLS_VERIFY": "1"}) is None


def _frame(stream: int, data: bytes) -> bytes:
    return struct.pack(">BxxxL", stream, len(data)) + data


def _reader(data: bytes) -> Any:
    view = memoryview(data)

    def recv(size: int) -> bytes:
        nonlocal view
        piece, view = bytes(view[:size]), view[size:]
        return piece

    return recv


def test_the_reply_stream_is_read_within_its_bounds() -> None:
    """The stream is PID 1's of a hostile container: other streams are handed aside, a frame's
    claimed length is read in pieces, and an unfinished line over the bound ends it."""
    stream = _frame(2, b"warning\n") + _frame(1, b'{"id": 1}\n{"id"') + _frame(1, b": 2}\n")
    pieces = list(frames(_reader(stream)))
    assert pieces[0] == (2, b"warning\n")
    lines = Lines()
    assert [line for s, chunk in pieces[1:] for line in lines.feed(chunk, 100)] == [b'{"id": 1}', b'{"id": 2}']
    huge = _frame(1, b"x" * 300_000)  # its header says 300 000 bytes; they come in 64 KiB pieces
    assert max(len(chunk) for _, chunk in frames(_reader(huge))) <= 1 << 16
    lines = Lines()
    with pytest.raises(ValueError, match="reply line over"):
        for _, chunk in frames(_reader(huge)):
            lines.feed(chunk, line_bound(100))
    assert list(frames(_reader(_frame(1, b"cut")[:-1]))) == [(1, b"cu")]  # ends with the stream


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    require_backend("docker")
    with Canaries(tmp_path_factory.mktemp("canaries")) as planted:
        yield planted


@pytest.mark.parametrize("probe", PROBES, ids=[probe.id for probe in PROBES])
def test_each_probe_asks_both_paths_for_the_sandbox_the_catalogue_proves(
    probe: Probe, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe's command line (`--sandbox docker --timeout T`, its limits as `--limit NAME=VALUE`,
    `-- ARGV`), in this process with the seam replaced (`both_paths.seam_calls`: nothing is made):
    the fast path decides to run it with `run_plain`, the typer path with `execute` (the full
    session), and both ask for the same sandbox: the limits `run_probe` gives the probe in
    test_attack_catalogue, its argv whole, no workspace. The canaries' values do not matter here:
    everything after `--` is the command, compared whole."""
    fast, full = seam_calls(probe_argv("docker", probe, {}), monkeypatch)
    assert (fast.seam, full.seam) == ("run_plain", "execute")
    limits = Limits(timeout=probe.timeout, **probe.limits)  # type: ignore[arg-type]
    assert fast.asked == full.asked == Asked("docker", limits, (), tuple(render(probe, {})), None, False)


@pytest.fixture(scope="module")
def catalogue(tokens: dict[str, str]) -> CatalogueRuns:
    """Every probe for real through the fast path and a probe of each category through the typer
    path too, in one go (`both_paths.run_catalogue`), once `run_plain` is seen to run here: were
    it to hand everything to the full path, the probes would all quietly have gone there."""
    assert plain.run_plain(Limits(), ["true"]) is not None, "the fast path hands everything to the full path here"
    return run_catalogue("docker", tokens)


@pytest.mark.slow
def test_every_probe_passes_through_the_fast_path(catalogue: CatalogueRuns) -> None:
    """Each probe of the catalogue for real as `sandbox run --sandbox docker -- ARGV` with its
    limits as flags, through the entry point users take (`cli.main`: `run_plain`, seen to run here
    before the catalogue ran). The typer path asks for the same sandbox (the test above); what it
    runs for real on its own is the next test's."""
    assert catalogue.fast_failures() == []


@pytest.mark.slow
def test_a_probe_of_each_category_has_the_same_verdict_and_exit_code_on_the_typer_path(
    catalogue: CatalogueRuns,
) -> None:
    """`both_paths.REPRESENTATIVES` (one per category of sandbox property, by the rule in its
    docstring) for real through the typer app as well: the full docker session reached from the
    CLI, its output and exit code. Not all 65 (each paid the typer app's imports): the typer path
    asks for the same sandbox as the fast path for every probe (the test above), and each probe's
    full session is proved from the Python API by test_attack_catalogue."""
    assert catalogue.typer_differences() == []
