"""Ray batch pass (2026-12-06), on a real head (`ray start --head` on 127.0.0.1, stopped by its PID:
`shared_ray_head` in tests/conftest.py): the driver's secrets and what listens. The driver is
started with canary values in a model variable (OPENAI_API_KEY, which `--ray` sends to the nodes
for the model) and in unrelated secret-like variables (which it must not send); while a job runs
in its sandbox on the node, the sandbox's processes and the Ray worker running the job are read
from /proc, and afterwards the run folders, batch.jsonl and everything Ray wrote under its temp
dir (its logs, sessions, spilled objects) are searched for each canary.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))

from ray_cluster import Head, descendants  # noqa: E402
from test_batch import COMMAND, JOB_TOML, env, ends, ledger  # noqa: E402
from test_batch_node_loss import minutely_csv  # noqa: E402


@pytest.fixture(scope="module")
def head(shared_ray_head: Head) -> Head:
    return shared_ray_head


def _environ(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""


def _listening(pid: int) -> set[str]:
    """The local addresses process `pid` listens on (TCP, v4 and v6, as /proc writes them)."""
    inodes = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        return set()
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:
                found.add(fields[1].split(":")[0])
    return found


LOOPBACK = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}


def _files_holding(root: Path, needle: bytes) -> list[str]:
    found = []
    for path in root.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink() and needle in path.read_bytes():
                found.append(str(path))
        except OSError:
            continue
    return found


def test_driver_secrets_reach_no_sandbox_record_or_ray_log_and_the_driver_listens_on_loopback_only(head: Head, tmp_path: Path) -> None:
    key, unrelated = f"CANARY-{secrets.token_hex(8)}", f"CANARY-{secrets.token_hex(8)}"
    (tmp_path / "e.csv").write_text(minutely_csv(days=14))
    (tmp_path / "shared.toml").write_text(JOB_TOML)
    (tmp_path / "jobs.jsonl").write_text('{"name": "a"}\n')
    out = tmp_path / "out"
    driver_env = {**env(), "OPENAI_API_KEY": key, "AWS_SECRET_ACCESS_KEY": unrelated, "GITHUB_TOKEN": unrelated,
                  "CODEROOM_ATTACK_CANARY": unrelated}  # fmt: skip
    driver = subprocess.Popen(
        [*COMMAND, "batch", str(tmp_path / "jobs.jsonl"), "--job-file", str(tmp_path / "shared.toml"),
         "--out", str(out), "--ray", head.address],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=driver_env,
    )  # fmt: skip
    sandbox_env, worker_env, driver_listens = b"", b"", set()
    try:
        deadline = time.monotonic() + 240
        while driver.poll() is None:
            assert time.monotonic() < deadline, "the batch did not end"
            driver_listens |= _listening(driver.pid)
            under = descendants(head.pid)
            bwraps = [pid for pid, name in under.items() if name == "bwrap"]
            for pid in under:
                if pid in bwraps or any(pid in descendants(b) for b in bwraps):
                    sandbox_env += _environ(pid)
                else:
                    worker_env += _environ(pid)
            time.sleep(0.2)
        stdout, stderr = driver.communicate(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(timeout=30)
    assert driver.returncode == 0, stderr.decode()
    assert ends(ledger(out))["a"]["status"] == "ok"
    assert sandbox_env, "no sandbox process was seen on the node"
    ray_files = [head.temp_dir]
    for canary in (key, unrelated):
        needle = canary.encode()
        assert needle not in sandbox_env, f"{canary} reached the sandbox"
        assert _files_holding(out, needle) == [], f"{canary} reached a record"
        assert _files_holding(ray_files[0], needle) == [], f"{canary} reached Ray's files"
        assert needle not in stdout + stderr
    assert unrelated.encode() not in worker_env  # the driver's other secrets stay on the driver
    assert driver_listens, "the driver was never seen listening (Ray's core worker does)"
    assert driver_listens <= LOOPBACK, driver_listens


PROBE = """
import glob, os, socket, sys
port, temp = int(sys.argv[1]), sys.argv[2]
for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
    try:
        socket.create_connection((host, port), timeout=5).close()
        print("CONNECTED", host)
    except OSError as exc:
        print("refused", host, exc.errno)
print("SEEN" if os.path.exists(temp) or glob.glob("/tmp/cr-ray-*") or glob.glob("/tmp/ray*") else "unseen")
"""


def test_a_sandbox_cannot_reach_the_ray_head_it_runs_beside(head: Head, tmp_path: Path) -> None:
    """Code in a job's sandbox on a node would own the cluster if it reached Ray's GCS port or
    its sockets (Ray runs what anyone who reaches it submits): neither is in its namespaces."""
    port = head.address.rpartition(":")[2]
    done = subprocess.run(
        [*COMMAND, "sandbox", "run", "--", "python3", "-c", PROBE, port, str(head.temp_dir)],
        capture_output=True, text=True, env=env(), timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["refused", "refused", "unseen"], done.stdout


def test_a_driver_killed_outright_leaves_no_sandbox_running_on_the_node(head: Head, tmp_path: Path) -> None:
    """SIGKILL gives the driver no chance to cancel: Ray ends a dead driver's workers, and each
    sandbox dies with its worker (bwrap --die-with-parent)."""
    (tmp_path / "e.csv").write_text(minutely_csv(days=28))
    (tmp_path / "shared.toml").write_text(JOB_TOML)
    (tmp_path / "jobs.jsonl").write_text('{"name": "a"}\n')
    driver = subprocess.Popen(
        [*COMMAND, "batch", str(tmp_path / "jobs.jsonl"), "--job-file", str(tmp_path / "shared.toml"),
         "--out", str(tmp_path / "out"), "--ray", head.address],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env(),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while "bwrap" not in descendants(head.pid).values():
            assert driver.poll() is None and time.monotonic() < deadline, driver.communicate()
            time.sleep(0.05)
        driver.kill()
        driver.wait(timeout=30)
    finally:
        if driver.poll() is None:
            driver.kill()
    deadline = time.monotonic() + 120
    while "bwrap" in descendants(head.pid).values():
        assert time.monotonic() < deadline, "a sandbox outlived its killed driver on the node"
        time.sleep(0.2)
