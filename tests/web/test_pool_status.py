"""A warm pool that cannot warm up says why (issue 20): once on the server's stderr, and in
`/api/config` for the page, while it keeps retrying less and less often."""

from __future__ import annotations

import json
import time
from pathlib import Path

from web.served import serve


def test_a_pool_that_cannot_warm_up_says_why_once(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    served = serve(runs, "--pool", "1", "--memory", "16M", "--sandbox", "local")  # too small for pandas
    try:
        pool: dict = {}
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not pool.get("failures"):
            time.sleep(0.5)
            pool = json.loads(served.authed("GET", "/api/config").body)["pool"]
        assert pool["failures"] >= 1 and pool["ready"] == 0 and pool["last_error"], pool
    finally:
        assert served.stop() == 143
    assert served.process.stderr is not None
    said = served.process.stderr.read()
    assert said.count("warm pool: a warm sandbox could not be started (KernelError: ") == 1, said
