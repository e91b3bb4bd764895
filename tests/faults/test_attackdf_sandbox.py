"""Attack pass D-F (2026-12-07) on what the Docker fast path added to the container
(`request.INIT_BOOTSTRAP`, init.py's host-compiled code in CODEROOM_INIT_CODE, `new_session_hex`),
from inside a real container and on the host:

- D-F2: sandbox code reads no CODEROOM_* variable of any process: PID 1's /proc environ (the
  execve's strings, which popping does not erase) is closed to it (init.py is undumpable), and
  every other process's environment, the commands' and the egress forwarder's, has none;
- D-F3: what the host sends names no host path (the marshalled code's strings included);
- D-F4: a value the image's Python cannot use (another magic number, cut short) makes it
  compile the source, in the real image; every string of the create request fits Linux's bound
  on one (a larger init.py sends no code rather than an execve that fails with E2BIG);
- D-F9: ids are 128 random bits, unique across forked processes drawing at once, and a name
  that collides is refused by the engine without touching the container that has it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from backends import require_backend
from coderoom.errors import SandboxFailed
from coderoom.sandboxes.docker import plain, request
from coderoom.sandboxes.docker.labels import DEFAULT_IMAGE
from coderoom.sandboxes.limits import Limits

LIMITS = Limits(timeout=30)
ENVIRONS = """
import json, os
seen = {}
for pid in sorted(os.listdir('/proc'), key=lambda p: (len(p), p)):
    if not pid.isdigit():
        continue
    try:
        with open('/proc/%s/environ' % pid, 'rb') as f:
            data = f.read()
        with open('/proc/%s/cmdline' % pid, 'rb') as f:
            name = f.read().split(b'\\0')[-2][-30:].decode(errors='replace')
    except OSError as e:
        seen[pid] = 'closed: %s' % e.strerror
        continue
    seen[pid] = [name, sorted(v.split(b'=')[0].decode() for v in data.split(b'\\0') if v.startswith(b'CODEROOM'))]
print(json.dumps(seen))
"""


@pytest.fixture
def docker() -> None:
    require_backend("docker")


def environs(stdout: bytes) -> dict[str, object]:
    seen = json.loads(stdout)
    assert isinstance(seen, dict)
    return seen


def test_sandbox_code_reads_no_coderoom_variable_of_any_process(docker: None) -> None:
    result = plain.run_plain(LIMITS, ["python3", "-c", ENVIRONS])
    assert result is not None and result.exit_code == 0, result
    seen = environs(result.stdout)
    assert str(seen["1"]).startswith("closed"), "PID 1's environ still holds what the host sent"
    others = {pid: value for pid, value in seen.items() if pid != "1"}
    assert others and all(isinstance(v, list) and v[1] == [] for v in others.values()), others


def test_the_egress_forwarder_carries_no_coderoom_variable_either(docker: None) -> None:
    from coderoom.egress.policy import parse_policy
    from coderoom.sandboxes import SandboxSpec, get_backend

    policy = parse_policy({"allow": ["api.test:9"], "resolve": {"api.test": "127.0.0.1"}}, source="test")

    async def probe() -> bytes:
        box = await get_backend("docker").start(SandboxSpec(backend="docker", limits=Limits(timeout=30, egress=policy)))
        try:
            return (await box.exec(["python3", "-c", ENVIRONS])).stdout
        finally:
            await box.close()

    seen = environs(asyncio.run(probe()))
    assert str(seen["1"]).startswith("closed")
    forwarders = [v for v in seen.values() if isinstance(v, list) and v[0] == "3128"]
    assert len(forwarders) == 1 and forwarders[0][1] == [], seen  # its argv ends with the port


def test_what_the_host_sends_names_no_host_path() -> None:
    import binascii

    code = binascii.a2b_base64(request.init_code().partition(":")[2])
    sent = code + request.INIT_SOURCE.encode() + request.INIT_BOOTSTRAP.encode()
    for path in {str(request.INIT_PATH.parent.parent.parent), sys.prefix, str(Path.home()), os.getcwd()}:
        assert path.encode() not in sent, path


@pytest.mark.parametrize(
    "value",
    [
        lambda v: "0d0d0d0a:" + v.partition(":")[2],  # another Python's magic number
        lambda v: v[: len(v) // 2],  # cut short
        lambda v: v.partition(":")[0] + ":" + "A" * 64,  # the right magic, no code in it
    ],
    ids=["other-magic", "cut", "no-code"],
)
def test_the_real_image_compiles_the_source_when_the_code_is_of_no_use(
    docker: None, monkeypatch: pytest.MonkeyPatch, value: object
) -> None:
    sent = value(request.init_code())  # type: ignore[operator]
    monkeypatch.setattr(request, "init_code", lambda: sent)
    result = plain.run_plain(LIMITS, ["sh", "-c", "echo ran"])
    assert result is not None and (result.exit_code, result.stdout) == (0, b"ran\n"), result


@pytest.mark.parametrize("egress", [False, True], ids=["plain", "allowlist"])
def test_every_string_of_the_create_request_fits_one_execve_string(tmp_path: Path, egress: bool) -> None:
    from coderoom.egress.policy import parse_policy

    policy = parse_policy({"allow": ["api.test:9"]}, source="test") if egress else None
    _, body = request.create_request(
        Limits(egress=policy), image="any", program=request.seccomp_for("x86_64"),
        egress_dir=tmp_path if egress else None,
    )  # fmt: skip
    for string in [*body["Env"], *body["Entrypoint"], *body["Cmd"]]:
        assert len(string) + 1 <= request.MAX_ARG_STRLEN, string[:60]


def test_a_larger_init_sends_no_code_rather_than_one_that_breaks_the_execve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = tmp_path / "init.py"
    big.write_text("PADDING = %r\n" % ("x" * request.MAX_ARG_STRLEN))
    monkeypatch.setattr(request, "INIT_PATH", big)
    assert request.init_code.__wrapped__() == ""


def test_ids_are_unique_across_processes_drawing_at_once() -> None:
    draw = (
        "import sys; from coderoom.sandboxes.docker.request import new_session_hex\n"
        "sys.stdout.write('\\n'.join(new_session_hex() for _ in range(5000)))"
    )
    runs = [subprocess.Popen([sys.executable, "-c", draw], stdout=subprocess.PIPE, text=True) for _ in range(6)]
    ids = [line for run in runs for line in run.communicate(timeout=120)[0].split()]
    assert len(ids) == 30000
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    assert len(set(ids)) == len(ids) and len({i[:12] for i in ids}) == len(ids)  # names too


def test_a_name_that_collides_is_refused_and_the_other_container_left_alone(
    docker: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken = request.new_session_hex()
    other = subprocess.run(
        ["docker", "create", "--name", f"coderoom-{taken[:12]}", "--label", "coderoom.attackdf=1", DEFAULT_IMAGE, "true"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout.strip()  # fmt: skip
    try:
        monkeypatch.setattr(request, "new_session_hex", lambda: taken)
        with pytest.raises(SandboxFailed, match="could not be created"):
            plain.run_plain(LIMITS, ["true"])
        state = subprocess.run(["docker", "inspect", "-f", "{{.State.Status}}", other], capture_output=True, text=True)
        assert state.stdout.strip() == "created", "the other container was touched"
    finally:
        subprocess.run(["docker", "rm", "-f", other], capture_output=True, timeout=60)
