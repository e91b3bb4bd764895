"""The Docker sandbox image: built from the Dockerfile shipped in this package, plus per-job
derived images for extra pip packages, cached by content so a second job with the same packages
starts at once.

Builds run with the host's network (`network_mode="host"`): pip and the base-image pull talk to
their registries exactly as they would from the host, and no bridge network is involved.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ...errors import ImageBuildError
from .. import requirements
from ..limits import shown_size
from ..spec import EnvironmentSpec, SandboxSpec
from .labels import DEFAULT_IMAGE, LABEL, owner_labels
from .options import docker_options

IMAGE_DIR = Path(__file__).with_name("inside")
DEFAULT_BASE_IMAGE = "python:3.12-slim"
PACKAGES_LABEL = "org.coderoom.packages"
LOCK_PATH = "/usr/local/share/coderoom/packages-lock.json"  # written by Dockerfile.packages

Progress = Callable[[str], None]

def docker_client() -> Any:
    import docker

    return docker.from_env()


def image_exists(client: Any, tag: str) -> bool:
    import docker.errors

    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def normalize_packages(packages: Iterable[str]) -> list[str]:
    """Sorted, de-duplicated, validated requirement strings (the rule: `sandboxes.requirements`)."""
    try:
        return requirements.normalize(packages)
    except ValueError as exc:
        raise ImageBuildError(str(exc)) from None


def build_image(
    client: Any,
    *,
    tag: str = DEFAULT_IMAGE,
    base_image: str = DEFAULT_BASE_IMAGE,
    environment: EnvironmentSpec | None = None,
    progress: Progress | None = None,
) -> str:
    """Build the sandbox image from the shipped Dockerfile on top of `base_image`. What the base
    lacks of the default analysis environment comes from pip: its index, or `environment`'s
    (`--find-links` folders are copied into the build, so it needs no network, as in CI)."""
    with tempfile.TemporaryDirectory(prefix="coderoom-image-") as tmp:
        context = Path(tmp)
        for item in IMAGE_DIR.iterdir():
            if item.is_file():
                shutil.copyfile(item, context / item.name)
        (context / "links").mkdir()  # the Dockerfile copies it, wheels or none
        _build(
            client,
            context=context,
            dockerfile="Dockerfile",
            tag=tag,
            buildargs={"BASE_IMAGE": base_image, "PIP_OPTIONS": _pip_options(environment, context)},
            labels={},
            progress=progress,
            hint="if no registry is reachable, pass --base-image with a local image that has Python 3 "
            "and --find-links with wheels of what it lacks (see .ci/docker-setup.sh for both, built offline)",
        )
    return tag


def derived_tag(client: Any, base_tag: str, packages: list[str], sources: list[object] | None = None) -> str:
    """Content address of `base_tag` + `packages`: the base's image id (so a rebuilt base gives a
    new tag), the sorted package list and where they come from (`_sources`)."""
    base_id = client.images.get(base_tag).id
    recipe = hashlib.sha256((IMAGE_DIR / "Dockerfile.packages").read_bytes()).hexdigest()  # a new recipe: new images
    content: list[object] = [base_id, packages, recipe] + ([sources] if sources else [])
    digest = hashlib.sha256(json.dumps(content).encode()).hexdigest()[:16]
    repository = base_tag.rsplit(":", 1)[0] if ":" in base_tag.rsplit("/", 1)[-1] else base_tag
    return f"{repository}:pkgs-{digest}"


def build_with_packages(
    client: Any,
    base_tag: str,
    packages: Iterable[str],
    *,
    environment: EnvironmentSpec | None = None,
    progress: Progress | None = None,
) -> str:
    """The image `base_tag` plus `packages`, built once and then reused. `environment` (the job's
    `[sandbox.environment]`) says where they come from: its index, or its find-links folders,
    copied into the build (then pip uses no index, as on the local backend)."""
    wanted = normalize_packages(packages)
    if not wanted:
        return base_tag
    sources = _sources(environment)
    tag = derived_tag(client, base_tag, wanted, sources)
    if image_exists(client, tag):
        return tag
    with tempfile.TemporaryDirectory(prefix="coderoom-image-") as tmp:
        context = Path(tmp)
        shutil.copy(IMAGE_DIR / "Dockerfile.packages", context / "Dockerfile")
        (context / "requirements.txt").write_text("\n".join(wanted) + "\n")
        pip_options = _pip_options(environment, context)
        _build(
            client,
            context=context,
            dockerfile="Dockerfile",
            tag=tag,
            buildargs={"BASE_IMAGE": base_tag, "PIP_OPTIONS": pip_options},
            labels={PACKAGES_LABEL: " ".join(wanted)},
            progress=progress,
            hint="pip needs PyPI, the [sandbox.environment] index_url or find_links to install extra packages",
        )
    return tag


def image_lock(client: Any, tag: str, declared: list[str]) -> dict[str, object]:
    """What the run record keeps of a derived image's packages, as the local backend's lock: the
    declaration and the exact versions its build installed, read from LOCK_PATH in a container
    created from `tag` and never started (nothing of the image runs), then parsed with bounds
    (`hostile.package_lock`). An image without the list, or with one that does not parse, is
    recorded as such, without versions."""
    import docker.errors

    from ...hostile.package_lock import lock_from_archive

    lock: dict[str, object] = {"image": tag, "declared": declared}
    container = client.api.create_container(
        tag, command=["true"], network_disabled=True, labels={LABEL: "1", **owner_labels()}
    )
    try:
        chunks, _stat = client.api.get_archive(container["Id"], LOCK_PATH)
        installed = lock_from_archive(chunks)
    except docker.errors.NotFound:
        lock["unknown"] = f"the image has no {LOCK_PATH} (built by an older coderoom, or not by coderoom)"
        return lock
    except ValueError as exc:
        lock["unknown"] = str(exc)[:200]
        return lock
    finally:
        client.api.remove_container(container["Id"], force=True)
    lock["installed"] = [{"name": name, "version": version} for name, version in installed]
    return lock


def _sources(environment: EnvironmentSpec | None) -> list[object]:
    """Where the packages come from, for the tag: the index and each find-links entry (a local
    folder by its files' names and sizes, so a new wheel gives a new image)."""
    if environment is None or not (environment.index_url or environment.find_links):
        return []
    links: list[object] = []
    for link in environment.find_links:
        folder = Path(link)
        files = [] if "://" in link else sorted((p.name, p.stat().st_size) for p in folder.iterdir() if p.is_file())
        links.append([link, files])
    return [environment.index_url, links]


def _pip_options(environment: EnvironmentSpec | None, context: Path) -> str:
    """pip's options in the build: the index, and the find-links folders copied into `context`
    (the build sees nothing of the host but its context) within the environment's max_size."""
    if environment is None:
        return ""
    options = []
    if environment.index_url:
        options += ["--index-url", environment.index_url]
    elif environment.find_links:
        options.append("--no-index")
    copied = 0
    for index, link in enumerate(environment.find_links):
        if "://" in link:
            options += ["--find-links", link]
            continue
        target = context / "links" / str(index)
        target.mkdir(parents=True)
        for item in sorted(Path(link).iterdir()):
            if item.is_file():
                copied += item.stat().st_size
                if copied > environment.max_size:
                    raise ImageBuildError(
                        f"the find_links folders hold more than the [sandbox.environment] max_size of "
                        f"{shown_size(environment.max_size)}; raise max_size or keep fewer files there"
                    )
                shutil.copyfile(item, target / item.name)
        options += ["--find-links", f"/tmp/coderoom-build/links/{index}"]
    return " ".join(shlex.quote(option) for option in options)


def ensure_image(spec: SandboxSpec, progress: Progress | None = None) -> str:
    """The image a job's sandbox runs: built on first use if it is the default image, with the
    job's extra packages baked in (`[sandbox.docker] packages` and `[sandbox.environment]`'s).
    Returns its tag."""
    options = docker_options(spec)
    client = docker_client()
    if not image_exists(client, options.image):
        if options.image != DEFAULT_IMAGE:
            raise ImageBuildError(
                f"Docker image {options.image!r} not found; build it with "
                f"`coderoom image build --tag {options.image}` or pull it"
            )
        if progress:
            progress(f"building the sandbox image {options.image} (first use)")
        build_image(client, tag=options.image, progress=progress)
    wanted = [*options.packages, *spec.environment.packages]
    return build_with_packages(client, options.image, wanted, environment=spec.environment, progress=progress)


def _build(
    client: Any,
    *,
    context: Path,
    dockerfile: str,
    tag: str,
    buildargs: dict[str, str],
    labels: dict[str, str],
    progress: Progress | None,
    hint: str,
) -> None:
    import docker.errors

    recent: list[str] = []
    try:
        for chunk in client.api.build(
            path=str(context),
            dockerfile=dockerfile,
            tag=tag,
            buildargs=buildargs,
            labels=labels or None,
            rm=True,
            forcerm=True,
            decode=True,
            network_mode="host",
        ):
            if "error" in chunk:
                detail = "\n".join(recent[-15:])
                raise ImageBuildError(f"building {tag} failed: {chunk['error'].strip()}\n{detail}\n({hint})")
            line = (chunk.get("stream") or chunk.get("status") or "").rstrip()
            if chunk.get("progress"):
                line = f"{line} {chunk['progress']}"
            if line:
                recent.append(line)
                if progress:
                    progress(line)
    except docker.errors.APIError as e:
        raise ImageBuildError(f"building {tag} failed: {e.explanation or e} ({hint})") from e
    if not image_exists(client, tag):
        raise ImageBuildError(f"building {tag} produced no image:\n" + "\n".join(recent[-15:]))
