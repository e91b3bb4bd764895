"""`--sandbox docker`: the SDK's Docker backend, hardened.

The SDK's backend runs as root with no limits, leaves stopped containers behind and takes ~10 s
to close (its `tail -f` PID 1 ignores SIGTERM). Ours (`session`) runs a non-root, read-only,
capability-less container with coderoom's limits, labelled (`labels`) so `prune` finds
leftovers, and removes it on close. `image` builds the sandbox image from `inside/`'s
Dockerfile; `commands` is `coderoom image ...`. This module imports without the `docker`
package so the registry can say why the backend is unavailable.
"""

from __future__ import annotations

from typing import Any

from ..base import Progress
from ..spec import SandboxSpec
from .labels import LABEL


class DockerBackend:
    name = "docker"
    leftovers = "sandbox container"
    isolates = True
    summary = "a hardened container (non-root, read-only, no capabilities, no network); needs a Docker engine"

    def unavailable_reason(self, spec: SandboxSpec) -> str | None:
        try:
            import docker
        except ImportError:
            return "the docker backend needs the `docker` Python package: pip install 'coderoom[docker]'"
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

    def prepare(self, spec: SandboxSpec, progress: Progress) -> None:
        """Build the sandbox image (and the job's derived image) if missing, with progress."""
        from .image import ensure_image

        ensure_image(spec, progress=progress)

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
        return CoderoomDockerClient(docker_client(), limits=spec.limits), options

    def prune(self) -> int:
        return prune()

    def info(self) -> str:
        return "memory: docker --memory (cgroup), swap included\nnetwork: none unless network = true"

    def commands(self) -> Any:
        from .commands import image_app

        return image_app


def prune(client: Any | None = None) -> int:
    """Remove every coderoom sandbox container (running or not); returns how many."""
    import docker.errors

    from .image import docker_client

    client = client or docker_client()
    removed = 0
    for container in client.containers.list(all=True, filters={"label": f"{LABEL}=1"}):
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            continue
        removed += 1
    return removed


backend = DockerBackend()
