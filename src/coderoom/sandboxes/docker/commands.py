"""`coderoom image build`: the Docker backend's own command (the sandbox image, from the
Dockerfile shipped in `inside/`). The CLI mounts it because the backend offers it."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from .labels import DEFAULT_IMAGE

image_app = typer.Typer(name="image", help="The Docker sandbox image.", no_args_is_help=True)


@image_app.command("build")
def build(
    tag: Annotated[str, typer.Option(help="tag of the image to build")] = DEFAULT_IMAGE,
    base_image: Annotated[
        str,
        typer.Option(help="image to build on: any image with Python 3 and pip or the analysis stack"),
    ] = "python:3.12-slim",
    package: Annotated[
        list[str] | None,
        typer.Option("--package", help="extra pip package baked into a derived image (repeatable)"),
    ] = None,
    find_links: Annotated[
        list[str] | None,
        typer.Option(
            "--find-links",
            help="folder of wheels for what the base image lacks (and --package): pip then uses no "
            "index, so the build needs no network (repeatable)",
        ),
    ] = None,
) -> None:
    """Build the sandbox image (and, with --package, the derived image a job with those packages uses)."""
    from pydantic import ValidationError

    from ..spec import EnvironmentSpec
    from .image import (
        ImageBuildError,
        build_image,
        build_with_packages,
        docker_client,
    )

    console = Console(stderr=True)
    try:
        environment = EnvironmentSpec(find_links=find_links or [])
    except ValidationError as e:
        reason = str(e.errors()[0]["msg"]).removeprefix("Value error, ")
        console.print(f"--find-links: {reason}", style="red", highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(2) from None
    try:
        client = docker_client()
        client.ping()
    except Exception as e:  # ImportError (no docker package) or no engine
        console.print(f"[red]cannot reach a Docker engine:[/] {e}")
        raise typer.Exit(1) from None

    with console.status(f"building {tag}") as status:

        def progress(line: str) -> None:
            first = " ".join(line.split())[:110]
            if line.startswith(("Step ", "Successfully")):
                console.print(first, style="dim", highlight=False, markup=False, soft_wrap=True)
            status.update(f"building {tag}: {first[:70]}")

        try:
            built = build_image(client, tag=tag, base_image=base_image, environment=environment, progress=progress)
            if package:
                built = build_with_packages(client, built, package, environment=environment, progress=progress)
        except ImageBuildError as e:
            console.print(f"[red]{e}[/]", highlight=False)
            raise typer.Exit(1) from None
    console.print(f"[green]built[/] {built}")
    typer.echo(built)
