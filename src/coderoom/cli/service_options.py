"""What `coderoom serve` and `coderoom mcp` both take about their sessions: the sandbox limits
every session gets (no client chooses them; `--limit` is `limit_option`'s, read by
`sandboxes.limits.limits_from_flags`), the allowlist (`--allow-host`, `--resolve`, which `run`
takes too), the declared packages (`--package`, as `run`'s), all read by the one parser
(`sandboxes.flags.SandboxFlags`), and the warm pool (`warm_pool`: this machine's, or one per
node with `--ray`). One definition, so the
servers cannot drift apart in names, defaults or validation."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from ..errors import UsageError
from ..sandboxes.requirements import PACKAGE_HELP

if TYPE_CHECKING:  # pydantic models: --help imports neither (tests/core/test_startup.py)
    from ..sandboxes.spec import SandboxSpec
    from ..service.pool import Pool as WarmPoolKind

Memory = Annotated[Optional[str], typer.Option(help="sandbox memory of every session, e.g. 2G")]
Timeout = Annotated[Optional[float], typer.Option(help="seconds per command or cell")]
AllowHost = Annotated[
    list[str],
    typer.Option("--allow-host", metavar="HOST[:PORT]", help="HOST[:PORT] the sandbox may reach through the host's proxy (repeatable; no port: 443 and 80)"),
]
Resolve = Annotated[
    list[str],
    typer.Option("--resolve", metavar="HOST=ADDRESS", help="HOST=ADDRESS: the address the proxy uses for HOST (repeatable; the only way to reach loopback or private addresses)"),
]
Package = Annotated[list[str], typer.Option("--package", help=PACKAGE_HELP + "; every session's sandbox has it")]
IdleTimeout = Annotated[float, typer.Option(help="seconds before an unused session is closed")]
POOL_HELP = "warm sandboxes kept ready (0: none); with --ray, on each node, each holding its cpus and memory there"
Pool = Annotated[int, typer.Option(help=POOL_HELP)]
PoolMaxIdle = Annotated[float, typer.Option(help="seconds before an unclaimed warm sandbox is recycled")]

Ray = Annotated[
    Optional[str],
    typer.Option("--ray", metavar="ADDRESS", help="place each session on a node of the Ray cluster at HOST:PORT (or auto: the one on this machine), as a Ray actor; pip install 'coderoom[ray]'"),
]

IDLE_TIMEOUT_DEFAULT_S = 900.0
POOL_MAX_IDLE_DEFAULT_S = 600.0


def check_pool(pool: int, pool_max_idle: float, idle_timeout: float) -> None:
    if pool < 0:
        raise UsageError(f"--pool {pool}: 0 or more")
    if pool_max_idle <= 0 or idle_timeout <= 0:
        raise UsageError("--pool-max-idle and --idle-timeout: more than 0 seconds")


def ray_opener(address: str | None) -> Any:
    """With `--ray ADDRESS`: the cluster joined (a usage error when there is none, as `batch
    --ray`'s) and the manager's opener that places each session on a node; None without it."""
    if address is None:
        return None
    import os

    from ..cluster.connect import connect
    from ..service.ray_session import RayOpener

    connect(address)
    return RayOpener(os.environ)


def ray_jobs(runs: Path) -> Any:
    """After `ray_opener` joined the cluster: `coderoom mcp --ray`'s run_job runner, each run one
    job as `coderoom batch --ray` runs it (`batch.cluster.RayJobs`), its run folder under `runs`."""
    import os

    from ..batch.cluster import RayJobs

    return RayJobs(os.environ, out=runs)


def warm_pool(size: int, max_idle: float, spec: SandboxSpec, on_ray: bool) -> WarmPoolKind | None:
    """The server's warm pool of sandboxes of `spec` (the server's, never a client's): None for
    `--pool 0`; with `--ray`, `size` warm session actors on each node (`ray_pool.RayWarmPool`),
    else `size` sandboxes on this machine (`WarmPool`)."""
    if size == 0:
        return None
    if on_ray:
        from ..service.ray_pool import RayWarmPool, session_spec

        return RayWarmPool(size, max_idle, session_spec(spec.backend, spec.limits, spec.environment))
    from ..service.pool import WarmPool

    return WarmPool(size, max_idle, spec)
