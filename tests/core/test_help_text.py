"""Every command's `--help` reads the same whether typer's help renderer was loaded with the
stand-ins for rich.markdown and rich.traceback (`cli.rich_help`, how `coderoom` runs) or with
the real modules; a stand-in that is used after all acts as the class it stands for."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from rich.markdown import Markdown
from rich.traceback import Traceback

from coderoom.cli.rich_help import _Deferred

# Renders `--help` of every command and group in one fresh interpreter; with "real", the two
# modules are imported first, so typer's renderer gets them and no stand-in is made.
RENDER = """
import contextlib, io, json, sys
if sys.argv[1] == "real":
    import rich.markdown, rich.traceback
import typer.main
from coderoom.cli import app
import typer.rich_utils as rich_utils

def paths(command, prefix):
    yield prefix
    for name, sub in (getattr(command, "commands", None) or {}).items():
        yield from paths(sub, [*prefix, name])

root = typer.main.get_command(app)
shown = {}
for path in paths(root, []):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        root.main([*path, "--help"], prog_name="coderoom", standalone_mode=False)
    shown[" ".join(path)] = out.getvalue()
standing_in = all(type(cls).__name__ == "_Deferred" for cls in (rich_utils.Markdown, rich_utils.Traceback))
loaded = sorted(m for m in sys.modules if m.startswith(("rich.markdown", "rich.traceback", "markdown_it")))
print(json.dumps({"standing_in": standing_in, "modules": loaded, "help": shown}))
"""


def rendered(mode: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", RENDER, mode], capture_output=True, text=True, timeout=120,
        env={**os.environ, "COLUMNS": "100", "FORCE_COLOR": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_every_command_s_help_is_the_same_text_with_the_stand_ins() -> None:
    deferred, real = rendered("deferred"), rendered("real")
    assert deferred["standing_in"] and deferred["modules"] == []  # the renderer never needed them
    assert not real["standing_in"] and "rich.markdown" in real["modules"]
    assert len(real["help"]) >= 10 and "sandbox run" in real["help"]  # every command, nested ones too
    assert all("\x1b[" in text for text in real["help"].values())  # styled: a style change shows
    assert deferred["help"] == real["help"]


def test_a_stand_in_used_after_all_is_the_real_class() -> None:
    markdown = _Deferred("Markdown", (), {"_module": "rich.markdown"})
    traceback = _Deferred("Traceback", (), {"_module": "rich.traceback"})
    assert isinstance(markdown("*a*"), Markdown)
    try:
        raise ValueError("shown")
    except ValueError as error:
        assert isinstance(traceback.from_exception(type(error), error, error.__traceback__), Traceback)
    assert (markdown | None).__args__ == (markdown, type(None))  # typer's annotations take a union of it
