"""A cluster node lost mid-job under `coderoom batch --ray`: the job runs again on another node,
the first attempt's partial record is kept as a run folder of its own beside the final one, and
the job appears once in the summary and once (one start, one end) in batch.jsonl.

The cluster is Ray's own one-machine multi-node cluster (`ray.cluster_utils.Cluster`): a head
that runs no job (no CPUs) and two worker nodes of one CPU each, so two one-CPU jobs run one per
node; the node is removed (its processes killed, no grace) while its job's sandbox runs.
"""

from __future__ import annotations

import json
import math
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest

from backends import require_backend
from coderoom.record import read_record
from ray_cluster import has_descendant, lose_node, multi_node_cluster
from test_batch import COMMAND, JOB_TOML, ends, env, ledger


def minutely_csv(days: int) -> str:
    """A day-shaped series a minute apart with one hour-long spike: the offline analyst takes
    seconds over it (an hourly month takes about one)."""
    rows = ["timestamp,energy_kwh"]
    start = datetime(2024, 1, 1)
    for minute in range(60 * 24 * days):
        value = 50 + 10 * math.sin(minute / 1440 * 2 * math.pi) + (200 if 6000 <= minute < 6060 else 0)
        rows.append(f"{start + timedelta(minutes=minute):%Y-%m-%d %H:%M},{value:.2f}")
    return "\n".join(rows) + "\n"


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Any, Any, Any]]:
    """(cluster, node_a, node_b): `ray_cluster.multi_node_cluster`, two one-CPU nodes."""
    require_backend("local")
    with multi_node_cluster(workers=2, cpus=1) as (started, (node_a, node_b)):
        yield started, node_a, node_b


def test_a_job_whose_node_is_lost_reruns_elsewhere_once_with_its_partial_attempt_kept(cluster, tmp_path) -> None:
    started, node_a, node_b = cluster
    (tmp_path / "e.csv").write_text(minutely_csv(days=28))  # seconds of work: its node is lost mid-job
    (tmp_path / "shared.toml").write_text(JOB_TOML)
    manifest = tmp_path / "jobs.jsonl"
    manifest.write_text("".join(json.dumps({"name": name}) + "\n" for name in ("x", "y")))
    out = tmp_path / "out"
    driver = subprocess.Popen(
        [*COMMAND, "batch", str(manifest), "--job-file", str(tmp_path / "shared.toml"), "--out", str(out),
         "--parallel", "2", "--ray", started.address],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(),
    )  # fmt: skip
    try:
        raylet_a = node_a.all_processes["raylet"][0].process.pid
        deadline = time.monotonic() + 180
        while not has_descendant(raylet_a, "bwrap"):  # node a's job is in its sandbox
            assert driver.poll() is None and time.monotonic() < deadline, driver.communicate()
            time.sleep(0.05)
        lose_node(started, node_a)
        stdout, stderr = driver.communicate(timeout=300)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 0, stderr
    lines = ledger(out)
    assert sorted((line["job"], line["event"]) for line in lines) == [
        ("x", "end"), ("x", "start"), ("y", "end"), ("y", "start"),
    ]  # fmt: skip
    ended = ends(lines)
    rerun = [line for line in ended.values() if line["lost"]]
    assert len(rerun) == 1, ended
    [lost] = rerun[0]["lost"]
    assert lost["node"] == node_a.node_id and lost["host"] == "127.0.0.1"
    for line in ended.values():
        assert (line["status"], line["node"]) == ("ok", node_b.node_id)
    partial = read_record(out / lost["run_dir"]).events
    assert partial[0].type == "run_start" and partial[0].job["name"] == rerun[0]["job"]
    assert all(event.type != "run_end" for event in partial)  # cut short with its node
    final = read_record(out / rerun[0]["run_dir"]).events
    assert (final[0].type, final[-1].type, final[-1].status) == ("run_start", "run_end", "ok")
    assert lost["run_dir"] != rerun[0]["run_dir"]
    assert sorted(p.name for p in out.iterdir()) == sorted(["batch.jsonl", lost["run_dir"], *(l["run_dir"] for l in ended.values())])
    for job in ("x", "y"):
        assert sum(1 for row in stdout.splitlines() if row.lstrip("│ ").startswith(f"{job} ")) == 1, stdout
