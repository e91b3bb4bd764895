#!/usr/bin/env python3
"""The first cell of a `--ray` session from the warm pool per node against without it (issue 23):
the time from asking for a new session (`SessionManager.open` through `RayOpener`) to the first
cell's result, the cell session_bench's first cell (import pandas, read the showcase CSV, an
hourly groupby). Without the pool the open places an actor (its room, `cluster.placement`),
which starts its sandbox and kernel on its node; from the pool it takes a warm actor whose
sandbox and kernel are started with the imports done.

The cluster is Ray's one-machine multi-node `Cluster` as the tests start it
(`tests/ray_cluster.multi_node_cluster`: loopback only, every process stopped by its PID), a head
with no CPUs and `--nodes` nodes of 2 CPUs; sessions of 1 CPU, `--pool 1` per node. Each trial
measures both, one after the other, with the pool refilled before the next, so load falls on both
alike. On a loaded machine the milliseconds move with the load: the load average is printed.

    PYTHONPATH=src python benchmarks/ray_pool_bench.py [--trials 5] [--nodes 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from ray_cluster import multi_node_cluster  # noqa: E402  (the tests' loopback cluster, stopped by its PIDs)

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "examples" / "building_energy" / "data" / "building_energy.csv"
FIRST = (
    "import pandas as pd\n"
    "df = pd.read_csv('input/building_energy.csv', parse_dates=['timestamp'], index_col='timestamp')\n"
    "df.groupby(df.index.hour).mean()"
)
FILL_S = 600.0


async def first_cell(manager: object, files: dict[str, bytes]) -> float:
    """Seconds from asking for a session to its first cell's result; the session closed after."""
    started = time.perf_counter()
    session = await manager.open(files=files)  # type: ignore[attr-defined]
    result = await session.run_python(FIRST)
    took = time.perf_counter() - started
    assert result.status == "ok", result
    await manager.close(session.id)  # type: ignore[attr-defined]
    return took


async def measure(trials: int) -> tuple[list[float], list[float]]:
    from coderoom import SessionManager
    from coderoom.sandboxes.limits import Limits
    from coderoom.service.ray_pool import RayWarmPool, session_spec
    from coderoom.service.ray_session import RayOpener

    limits = Limits(cpus=1)
    files = {"input/building_energy.csv": DATA.read_bytes()}
    pool = RayWarmPool(1, 3600.0, session_spec("local", limits, None))
    pooled, cold = [], []
    with tempfile.TemporaryDirectory(prefix="cr-raypool-bench-") as runs:
        common = {"model": "offline", "limits": limits, "opener": RayOpener({})}
        async with SessionManager(runs_dir=Path(runs) / "pooled", pool=pool, **common) as with_pool, \
                SessionManager(runs_dir=Path(runs) / "cold", **common) as without:  # fmt: skip
            await pool.start()
            for trial in range(trials):
                await pool.wait_ready(FILL_S)
                pooled.append(await first_cell(with_pool, files))
                await pool.wait_ready(FILL_S)
                cold.append(await first_cell(without, files))
                print(f"trial {trial + 1}: from the pool {pooled[-1]:.2f} s, without {cold[-1]:.2f} s", flush=True)
    return pooled, cold


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=2)
    args = parser.parse_args()
    with multi_node_cluster(workers=args.nodes, cpus=2) as (started, _):
        import ray

        from coderoom.cluster.connect import connect

        connect(started.address)
        try:
            pooled, cold = asyncio.run(measure(args.trials))
        finally:
            ray.shutdown()
    print(f"first cell over Ray, {args.nodes} nodes of 2 cpus, {args.trials} trials (median, min, max in s):")
    for label, values in (("from the warm pool per node", pooled), ("without a pool", cold)):
        print(f"  {label:28} {statistics.median(values):6.2f} {min(values):6.2f} {max(values):6.2f}")
    print("load average:", " ".join(f"{load:.2f}" for load in os.getloadavg()))


if __name__ == "__main__":
    main()
