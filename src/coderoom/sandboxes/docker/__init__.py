"""`--sandbox docker`: a hardened container.

`container` is the SDK-free core (`DockerSandbox`, what `start` returns): a non-root, read-only,
capability-less container with coderoom's limits, labelled (`labels`) so `prune` finds
leftovers, driven through init.py over `channel`, archived within bounds (`archive`), removed
on close. `session` adapts it to the Agents SDK's Docker client and session (whose own backend
runs as root with no limits, leaves stopped containers behind and takes ~10 s to close). `image` builds the sandbox image from `inside/`'s
Dockerfile; `commands` is `coderoom image ...`. `plain` runs `coderoom sandbox run`'s one command
in the same container through `engine`, a small client of the Engine API's socket (`run_plain`:
the CLI's fast path). This module imports without the `docker` package so the registry can say
why the backend is unavailable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...errors import missing_extra
from ..base import Progress
from .labels import LABEL, owner_gone

if TYPE_CHECKING:  # pydantic is not imported for --help
    from pydantic import BaseModel

    from ..core import CommandResult
    from ..orphans import Orphan
    from ..spec import SandboxSpec

if TYPE_CHECKING:
    from .container import DockerSandbox


class DockerBackend:
    name = "docker"
    leftovers = "sandbox container"
    isolates = True
    summary = "a hardened container (non-root, read-only, no capabilities, no network); needs a Docker engine"

    def unavailable_reason(self, spec: SandboxSpec) -> str | None:
        if spec.limits.egress is not None:
            import os

            from .engine import socket_path

            if socket_path(os.environ) is None:
                return (
                    "an allowlist (--allow-host, [sandbox.network] allow) needs a Docker engine on this machine "
                    "(the proxy's socket is a bind mount); DOCKER_HOST names one elsewhere"
                )
        try:
            import docker
        except ImportError:
            return missing_extra("the docker backend", "docker", "docker")
        try:
            client = docker.from_env(timeout=10)
            try:
                client.ping()
            finally:
                client.close()
        except Exception as e:
            return (
                f"no Docker engine answers ({type(e).__name__}: {e}); start dockerd "
                "(or Docker Desktop), or point DOCKER_HOST at a running engine"
            )
        return None

    def options_model(self) -> type[BaseModel]:
        from .options import DockerOptions

        return DockerOptions

    def prepare(self, spec: SandboxSpec, progress: Progress) -> None:
        """Build the sandbox image (and the job's derived image) if missing, with progress."""
        from .image import ensure_image

        ensure_image(spec, progress=progress)

    def packages_lock(self, spec: SandboxSpec) -> dict[str, object] | None:
        """The declared packages and the exact versions the derived image's build installed for
        them, for the run record (read from the image without running it: `image.image_lock`)."""
        from .image import docker_client, ensure_image, image_lock

        return image_lock(docker_client(), ensure_image(spec), spec.environment.packages)

    async def start(self, spec: SandboxSpec) -> DockerSandbox:
        """A started sandbox for `spec` (the image is built first if it is missing)."""
        import asyncio

        from .container import DockerSandbox
        from .image import docker_client, ensure_image

        image = await asyncio.to_thread(ensure_image, spec)
        return await DockerSandbox.create(docker_client(), image=image, limits=spec.limits)

    def run_plain(self, spec: SandboxSpec, argv: list[str]) -> CommandResult | None:
        """`argv` run in a fresh sandbox for `spec`'s limits without docker-py or asyncio (`plain`:
        the CLI's fast path); None when the full path must run it (nothing was made)."""
        from .plain import run_plain

        if spec.limits.egress is not None:
            return None  # the full path runs the proxy (`container`) in its event loop
        return run_plain(spec.limits, argv)

    def client(self, spec: SandboxSpec) -> tuple[Any, Any]:
        """A hardened client for `spec`; builds the image first if it is missing (silently: the
        CLI calls `prepare` with progress before it gets here)."""
        from agents.sandbox.sandboxes.docker import DockerSandboxClientOptions

        from .image import docker_client, ensure_image
        from .session import CoderoomDockerClient

        image = ensure_image(spec)
        options = DockerSandboxClientOptions(
            image=image, network_mode=None if spec.limits.network else "none"
        )
        return CoderoomDockerClient(docker_client(), limits=spec.limits, image=image), options

    def prune(self, skipped: list[str] | None = None) -> int:
        from .bindings import prune as prune_bindings

        prune_bindings(skipped)  # records only: recovery saved (or named lost) a dead owner's workspace just before
        return prune(skipped=skipped)

    def abandoned_runs(self, spec: SandboxSpec) -> list[Orphan]:
        """`orphans.FindsOrphans`: the runs whose owner died; each one's `reopen` saves the
        workspace from its container, kept for a recovery window (`bindings`, `rescue`), or
        names it lost."""
        from .bindings import abandoned_runs

        return abandoned_runs(spec.limits)

    def info(self) -> str:
        return (
            "memory: docker --memory (cgroup), swap included\n"
            "network: none unless network = true; then a network of the session's own, icc off, no IPv6, "
            "prohibit routes to the host and private ranges; with an allowlist, none and the host proxy's "
            "socket bound read-only"
        )

    def commands(self) -> Any:
        from .commands import image_app

        return image_app


def prune(client: Any | None = None, skipped: list[str] | None = None) -> int:
    """Remove the coderoom containers whose owner is gone (see `labels`), then their networks
    (`network`: a session's own, when it had network on) and the folders of their egress
    proxies' sockets (`egress`); returns how many containers.

    A live run's container or network is never touched, running or not, nor one whose binding
    folders cannot be told free (`recovering.CannotTell`). One left so, or one the engine refuses
    to remove, is added to `skipped` (with a list to add to) and the others are still pruned."""
    import docker.errors

    from ...hostile.names import shown
    from .. import recovering
    from . import bindings, egress
    from .image import docker_client
    from .network import prune_networks

    client = client or docker_client()
    removed = 0
    # ignore_removed: docker-py inspects each listed container, and one that a closing session
    # (auto_remove) takes away in between would otherwise end the prune with NotFound
    for container in client.containers.list(all=True, filters={"label": f"{LABEL}=1"}, ignore_removed=True):
        if not owner_gone(container.labels):
            continue
        try:
            with recovering.all_held(bindings.of_container(container.id)) as mine:
                if not mine:  # its workspace is being saved by another process: that one removes it
                    continue
                container.remove(force=True)
        except docker.errors.NotFound:
            continue
        except docker.errors.APIError as exc:
            if exc.status_code == 409:  # the daemon is removing it already (auto_remove)
                continue
            if skipped is None:
                raise
            skipped.append(f"container {container.short_id} left in place: {exc.explanation or exc}")
            continue
        except recovering.CannotTell as exc:  # as if another process were saving it: left, and why
            if skipped is None:
                raise
            skipped.append(f"container {container.short_id} left in place: {shown(exc, 300)}")
            continue
        removed += 1
    prune_networks(client, owner_gone, skipped)
    egress.prune(skipped)
    return removed


backend = DockerBackend()
