"""Which warm pool a server gets (`cli.service_options.warm_pool`, the one place `serve` and `mcp`
both take it from): none for `--pool 0`; with `--ray`, one per node of the server's sandbox spec
as a node's session makes it (so a session of the server's settings matches it); else this
machine's. Neither starts anything until `start`."""

from __future__ import annotations

import inspect

from coderoom.cli import mcp_cmd, serve_cmd
from coderoom.cli.service_options import warm_pool
from coderoom.sandboxes.limits import Limits
from coderoom.sandboxes.spec import SandboxSpec
from coderoom.service.pool import WarmPool
from coderoom.service.ray_pool import RayWarmPool, session_spec

SPEC = SandboxSpec(backend="local", limits=Limits(cpus=1))


def test_pool_zero_is_no_pool_with_or_without_ray() -> None:
    assert warm_pool(0, 60.0, SPEC, on_ray=False) is None
    assert warm_pool(0, 60.0, SPEC, on_ray=True) is None


def test_with_ray_the_pool_is_per_node_and_matches_a_session_of_the_servers_settings() -> None:
    pool = warm_pool(2, 60.0, SPEC, on_ray=True)
    assert isinstance(pool, RayWarmPool)
    assert (pool.size, pool.max_idle_s) == (2, 60.0)
    assert pool.matches(session_spec("local", Limits(cpus=1), None))
    assert not pool.matches(session_spec("local", Limits(cpus=2), None))  # another session's limits: no warm one


def test_without_ray_the_pool_is_this_machines() -> None:
    pool = warm_pool(1, 60.0, SPEC, on_ray=False)
    assert isinstance(pool, WarmPool) and pool.matches(SPEC)


def test_serve_and_mcp_both_take_their_pool_from_the_one_place() -> None:
    for module in (serve_cmd, mcp_cmd):
        source = inspect.getsource(module)
        assert "options.warm_pool(" in source and "WarmPool(" not in source, module.__name__
