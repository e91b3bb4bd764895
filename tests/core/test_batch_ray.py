"""`coderoom batch --ray`: on a real Ray head (`ray start --head` on 127.0.0.1, two CPUs,
`shared_ray_head` in tests/conftest.py, stopped by its PID), each job runs on the cluster's node
and comes back as the run folder a local run writes, batch.jsonl naming the node; a killed
driver's batch goes on with `--resume`; no cluster, or no Ray, is one line and exit 2 before
anything is written.

The runs are real: local sandboxes on the node, the offline analyst (no model server), and the
README's example job (examples/building_energy).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coderoom.record import read_record
from ray_cluster import Head, free_port, has_descendant, require_ray
from test_batch import COMMAND, JOB_TOML, coderoom, ends, env, hourly_csv, job_folder, ledger

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "building_energy"
RUN_FOLDER = {"run.jsonl", "workspace.tar", "output"}


@pytest.fixture(scope="module")
def head(shared_ray_head: Head) -> Head:
    return shared_ray_head


@pytest.fixture(scope="module")
def cluster_batch(head: Head, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """Two small jobs and the README's example, sent to the head."""
    root = tmp_path_factory.mktemp("ray-batch")
    jobs = [job_folder(root, "small1", hourly_csv()), job_folder(root, "small2", hourly_csv()), EXAMPLE]
    done = coderoom("batch", *jobs, "--out", root / "out", "--ray", head.address)
    return root / "out", done


def test_each_job_runs_on_the_cluster_node_and_batch_jsonl_names_it(head: Head, cluster_batch) -> None:
    out, done = cluster_batch
    assert done.returncode == 0, done.stderr
    ended = ends(ledger(out))
    assert sorted(ended) == ["building_energy", "small1", "small2"]
    node = head.node_id()
    for line in ended.values():
        assert (line["status"], line["node"], line["host"], line["lost"]) == ("ok", node, "127.0.0.1", [])


def test_a_cluster_run_folder_is_what_a_local_run_writes(cluster_batch) -> None:
    out, _ = cluster_batch
    for job, line in ends(ledger(out)).items():
        folder = out / line["run_dir"]
        assert {path.name for path in folder.iterdir()} == RUN_FOLDER
        record = read_record(folder)
        start, end = record.events[0], record.events[-1]
        assert start.job["name"] == job and (end.type, end.status) == ("run_end", "ok")
        assert end.usage.total_tokens == line["tokens"] > 0
        # the record names the inputs where the driver has them, not the node's copy
        assert all(Path(path).is_file() for path in start.job["inputs"].values()), start.job["inputs"]
    example = out / ends(ledger(out))["building_energy"]["run_dir"]
    assert {p.name for p in (example / "output").iterdir()} == {"anomalies.csv", "energy_anomalies.png", "anomaly_report.md"}
    found = (example / "output/anomalies.csv").read_text().splitlines()
    assert found[0].startswith("event_id,start,end,") and len(found) > 1  # the example has anomalies


def test_a_killed_driver_s_batch_goes_on_with_resume_skipping_what_finished(head: Head, tmp_path: Path) -> None:
    (tmp_path / "e.csv").write_text(hourly_csv(24 * 30))
    (tmp_path / "shared.toml").write_text(JOB_TOML)
    manifest = tmp_path / "jobs.jsonl"
    manifest.write_text("".join(json.dumps({"name": name}) + "\n" for name in ("a", "b", "c")))
    out = tmp_path / "out"
    args = [*COMMAND, "batch", str(manifest), "--job-file", str(tmp_path / "shared.toml"), "--out", str(out),
            "--parallel", "1", "--ray", head.address]  # fmt: skip
    driver = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env())
    try:
        deadline = time.monotonic() + 180
        while not (out / "batch.jsonl").is_file() or len([l for l in ledger(out) if l["event"] == "start"]) < 2:
            assert driver.poll() is None and time.monotonic() < deadline, driver.communicate()
            time.sleep(0.1)
        driver.send_signal(signal.SIGKILL)  # no chance to write anything more
        driver.wait(timeout=30)
    finally:
        if driver.poll() is None:
            driver.kill()
    before = ledger(out)
    assert sorted(ends(before)) == ["a"] and ends(before)["a"]["status"] == "ok"
    done = subprocess.run([*args, "--resume"], capture_output=True, text=True, env=env(), timeout=300)
    assert done.returncode == 0, done.stderr
    added = ledger(out)[len(before):]
    assert sorted((line["job"], line["event"]) for line in added) == [("b", "end"), ("b", "start"), ("c", "end"), ("c", "start")]
    assert all(line["status"] == "ok" for line in added if line["event"] == "end")
    assert done.stdout.count("(earlier run)") == 1


def test_auto_with_no_cluster_is_exit_2_and_starts_none(tmp_path: Path) -> None:
    require_ray()
    (tmp_path / "ray").mkdir()
    environment = {k: v for k, v in env().items() if k != "RAY_ADDRESS"}
    job = job_folder(tmp_path, "j", hourly_csv())
    done = subprocess.run(
        [*COMMAND, "batch", str(job), "--out", str(tmp_path / "out"), "--ray", "auto"],
        capture_output=True, text=True, env={**environment, "RAY_TMPDIR": str(tmp_path)}, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().startswith("coderoom: error: --ray auto: no Ray cluster found on this machine")
    assert "coderoom does not start one" in done.stderr
    assert not (tmp_path / "out").exists() and list((tmp_path / "ray").iterdir()) == []


def test_an_address_where_nothing_listens_is_exit_2_at_once(tmp_path: Path) -> None:
    require_ray()
    port = free_port()
    job = job_folder(tmp_path, "j", hourly_csv())
    done = coderoom("batch", job, "--out", tmp_path / "out", "--ray", f"127.0.0.1:{port}")
    assert done.returncode == 2, done.stderr
    assert f"nothing answers at 127.0.0.1:{port}" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


HIDE_RAY = '''
import sys

class _Absent:
    def find_spec(self, name, path=None, target=None):
        if name == "ray" or name.startswith("ray."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _Absent())
'''


def test_without_the_ray_extra_it_is_one_line_and_exit_2(tmp_path: Path) -> None:
    hidden = tmp_path / "hide"
    hidden.mkdir()
    (hidden / "sitecustomize.py").write_text(HIDE_RAY)
    job = job_folder(tmp_path, "j", hourly_csv())
    done = subprocess.run(
        [*COMMAND, "batch", str(job), "--out", str(tmp_path / "out"), "--ray", "127.0.0.1:1"],
        capture_output=True, text=True, env={**env(), "PYTHONPATH": str(hidden)}, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == "coderoom: error: --ray needs the `ray` Python package: pip install 'coderoom[ray]'"
    assert not (tmp_path / "out").exists()


def test_the_loopback_head_listens_on_loopback_only(head: Head) -> None:
    """What docs/scale.md tells users to run on one machine: no Ray server on another address."""
    pids = _group(head.pid)
    listening = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    inodes = _socket_inodes(pids)
    addresses = {fields[1].split(":")[0] for fields in listening if fields[3] == "0A" and fields[9] in inodes}
    assert addresses == {"0100007F"}  # 127.0.0.1, in /proc's byte order
    listening6 = [line.split() for line in Path("/proc/net/tcp6").read_text().splitlines()[1:]]
    addresses6 = {fields[1].split(":")[0] for fields in listening6 if fields[3] == "0A" and fields[9] in inodes}
    assert addresses6 <= {"0000000000000000FFFF00000100007F"}  # ::ffff:127.0.0.1


JOIN_AFTER_IMPORT = """
import sys
import ray  # imported before joining, as a program using the Python API may have done
from coderoom.cluster.connect import connect
connect(sys.argv[1])
print(ray._private.worker.global_worker.node.gcs_address)
ray.shutdown()
"""


def test_a_process_that_imported_ray_first_still_joins_a_loopback_head_on_loopback(head: Head) -> None:
    """Ray reads its "keep loopback" setting once, at import: `connect` must hold it for a process
    that imported ray before joining, or the driver dials the machine's network address (where
    this head does not listen) and waits there."""
    done = subprocess.run(
        [sys.executable, "-c", JOIN_AFTER_IMPORT, head.address], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == head.address


def _group(pgid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getpgid(int(entry.name)) == pgid:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _socket_inodes(pids: list[int]) -> set[str]:
    inodes = set()
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    return inodes



def test_sigint_to_the_driver_stops_the_jobs_on_the_cluster_and_keeps_their_records(head: Head, tmp_path: Path) -> None:
    from test_batch_node_loss import minutely_csv

    (tmp_path / "e.csv").write_text(minutely_csv(days=28))
    (tmp_path / "shared.toml").write_text(JOB_TOML)
    manifest = tmp_path / "jobs.jsonl"
    manifest.write_text("".join(json.dumps({"name": name}) + "\n" for name in ("a", "b", "c")))
    out = tmp_path / "out"
    _no_sandbox_left(head)  # an earlier test's, so the one seen below is this batch's
    driver = subprocess.Popen(
        [*COMMAND, "batch", str(manifest), "--job-file", str(tmp_path / "shared.toml"), "--out", str(out),
         "--parallel", "2", "--ray", head.address],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while not (_started(out) == 2 and has_descendant(head.pid, "bwrap")):  # a job in its sandbox
            assert driver.poll() is None and time.monotonic() < deadline, driver.communicate()
            time.sleep(0.05)
        driver.send_signal(signal.SIGINT)
        _, stderr = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 130, stderr
    lines = ledger(out)
    started = sorted(line["job"] for line in lines if line["event"] == "start")
    assert started == ["a", "b"] == sorted(ends(lines))
    for line in ends(lines).values():
        assert line["status"] == "interrupted" and "stopped" in line["error"]
    folders = [out / line["run_dir"] for line in ends(lines).values()]
    # the job in its sandbox has its record so far; one still starting on its worker has none
    # yet, and no empty record file either (CI once saw one: the log's attempt had no line yet)
    partials = [read_record(folder).events for folder in folders if (folder / "run.jsonl").exists()]
    assert all(partials), "an empty run.jsonl was kept for an attempt that had written nothing"
    assert any(events[0].type == "run_start" and events[-1].type != "run_end" for events in partials)
    _no_sandbox_left(head)  # and its sandbox is gone from the node


def _started(out: Path) -> int:
    try:
        return sum(1 for line in ledger(out) if line["event"] == "start")
    except (OSError, ValueError):
        return 0


def _no_sandbox_left(head: Head) -> None:
    deadline = time.monotonic() + 60
    while has_descendant(head.pid, "bwrap"):
        assert time.monotonic() < deadline, "a sandbox outlived its job on the node"
        time.sleep(0.2)


def test_a_job_no_node_has_room_for_is_exit_2_before_anything_runs(head: Head, tmp_path: Path) -> None:
    job = job_folder(tmp_path, "big", hourly_csv())
    done = coderoom("batch", job, "--out", tmp_path / "out", "--ray", head.address, "--limit", "cpus=16")
    assert done.returncode == 2, done.stderr
    assert "job big: needs 16 cpus and 2G of memory on one node; the cluster's nodes have at most 2 cpus" in " ".join(done.stderr.split())
    assert not (tmp_path / "out").exists()
