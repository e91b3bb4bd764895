"""Attack pass F-C: `coderoom` loads typer's help renderer with stand-ins for rich.markdown and
rich.traceback (`cli.rich_help`). No command path ends up with a stand-in where the real class
is needed: errors and usage errors print without them, and code that runs after the CLI was
loaded in the same process (the Python API, `show`'s Markdown) gets the real modules."""

from __future__ import annotations

import json
import subprocess
import sys

# One fresh interpreter: the CLI's app is loaded (with the stand-ins), a usage error is shown
# through typer's renderer, then the rest of the process uses rich.markdown and rich.traceback.
AFTER_THE_CLI = r"""
import contextlib, io, json, sys
from coderoom.cli import _typer_app
from coderoom.cli.rich_help import _Deferred
import click

app = _typer_app()
err = io.StringIO()
with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
    try:
        app(["show", "--no-such-option-fc"], prog_name="coderoom")
    except SystemExit as done:
        code = done.code
usage_modules = sorted(m for m in sys.modules if m.startswith(("markdown_it", "rich.markdown", "rich.traceback")))

from rich.console import Console
from coderoom.cli.display import safe_markdown
import rich, rich.markdown, rich.traceback
import typer.rich_utils as rich_utils

console = Console(record=True, width=60, color_system=None, file=io.StringIO())
rendered = safe_markdown("# FC title\n\n**bold** \x1b]0;fc-canary\x07 text")
console.print(rendered)
try:
    raise ValueError("fc-canary-traceback")
except ValueError as error:
    console.print(rich.traceback.Traceback.from_exception(type(error), error, error.__traceback__))
stand_ins = [name for name, module in sys.modules.items() if module is not None
             and any(type(v) is _Deferred for v in vars(module).values()) and name != "typer.rich_utils"]
print(json.dumps({
    "code": code, "usage": err.getvalue(), "usage_modules": usage_modules,
    "real": [type(sys.modules[n]).__name__ == "module" and hasattr(sys.modules[n], "__file__")
             for n in ("rich.markdown", "rich.traceback")],
    "same": rich.markdown.Markdown is type(rendered) and isinstance(rendered, rich_utils.Markdown),
    "text": console.export_text(), "stand_ins": stand_ins,
}))
"""


def test_after_the_cli_is_loaded_the_process_gets_the_real_modules() -> None:
    """F-C5: a usage error goes through typer's renderer with the stand-ins (neither markdown_it
    nor rich.markdown is loaded for it); afterwards rich.markdown and rich.traceback are the real
    modules, `show`'s Markdown of hostile text renders (control characters gone), a rich
    Traceback renders, no module but typer's renderer holds a stand-in, and a real Markdown is
    an instance of the renderer's stand-in (it acts as the class, isinstance too)."""
    done = subprocess.run([sys.executable, "-c", AFTER_THE_CLI], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["code"] == 2 and "no-such-option-fc" in seen["usage"]
    assert seen["usage_modules"] == []
    assert seen["real"] == [True, True] and seen["stand_ins"] == []
    assert "FC title" in seen["text"] and "bold" in seen["text"] and "\x1b" not in seen["text"]
    assert "fc-canary-traceback" in seen["text"]
    assert seen["same"] is True
