"""`coderoom export RUN_DIR --script FILE.py`: a standalone script that redoes the analysis with
no model: the agent's Python cells and shell commands, in order, in one process, the way the
sandbox ran them (one namespace for the cells, `sh -c` for the commands, figures saved and closed
after each cell). Cells that hung or crashed the kernel and commands left running are not
replayed; where the kernel lost its variables, the replay clears its namespace too.

The script needs only Python and whatever the cells import; `coderoom rerun` runs it in a fresh
sandbox with the original or new inputs. Started anywhere else, it runs the recorded code (written
by a model, read from a run.jsonl anyone may have edited) with that user's rights, so its first
lines say so. Text from the record reaches the script only as Python literals or as comments
that cannot end early (`repr`, `splitlines`): a comment never hides code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import RecordError
from ..hostile.text import terminal_safe
from .steps import Step, load_steps

RUNTIME = '''
import ast
import os
import subprocess
import sys
import traceback

os.environ.setdefault("MPLBACKEND", "Agg")
sys.path.append(os.getcwd())
FIGURES = ".coderoom/figures"
NAMESPACE = {}


def display(*objects):
    for obj in objects:
        print(repr(obj))


def reset():
    """The kernel lost its variables at this point of the original run."""
    NAMESPACE.clear()
    NAMESPACE.update({"__name__": "__main__", "display": display})


def python(cell, code):
    print(f"--- python cell {cell}", flush=True)
    filename = f"<cell-{cell}>"
    try:
        tree = ast.parse(code, filename)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        exec(compile(tree, filename, "exec"), NAMESPACE)
        if last is not None:
            value = eval(compile(ast.Expression(last.value), filename, "eval"), NAMESPACE)
            if value is not None:
                NAMESPACE["_"] = value
    except Exception:  # the agent saw this error and went on; so does the replay
        traceback.print_exc()
    save_figures(cell)


def save_figures(cell):
    """As the kernel did: every open figure saved under .coderoom/figures, then closed."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None or not plt.get_fignums():
        return
    os.makedirs(FIGURES, exist_ok=True)
    for index, number in enumerate(plt.get_fignums()[:8], 1):
        figure = plt.figure(number)
        figure.savefig(f"{FIGURES}/cell-{cell}-{index}.png", format="png", dpi=min(figure.dpi, 100))
    plt.close("all")


def shell(command, shell="sh", workdir=None):
    print(f"--- shell: {command.splitlines()[0][:100] if command else ''}", flush=True)
    sys.stdout.flush()
    done = subprocess.run([shell, "-c", command], cwd=workdir)
    if done.returncode:
        print(f"(exit code {done.returncode})", flush=True)


def check(outputs):
    missing = [path for path in outputs if not os.path.isfile(path) or os.path.getsize(path) == 0]
    for path in outputs:
        print(("missing " if path in missing else "ok      ") + path)
    return 1 if missing else 0
'''


UNTRUSTED = [
    "WARNING: this script runs the code recorded in a coderoom run, as it is, wherever you start it.",
    "That code was written by a model and read from run.jsonl, which anyone may have edited: it is",
    "untrusted. Started here, it runs with your rights, your files and your network. Read it first,",
    "or run it in a sandbox: `coderoom rerun RUN_DIR`.",
]


def literal(text: str) -> str:
    """A readable Python literal for `text`: a raw triple-quoted string when that is exact."""
    if (
        "'''" not in text
        and not text.endswith("\\")
        and "\r" not in text
        and all(ch == "\n" or ch == "\t" or ch.isprintable() for ch in text)
        and not text.endswith("'")
    ):
        return "r'''" + text + "'''"
    return repr(text)


def step_code(step: Step) -> list[str]:
    """The lines of the replay for one step (a comment when it is not replayed)."""
    if step.kind == "python":
        if step.cell is None:  # the kernel could not be reached: the code never ran
            return [f"# not replayed (the kernel was unreachable): {step.source[:80]!r}"]
        if not step.replayable:
            return [f"# cell {step.cell} not replayed: in the original run it was {step.status!r}"]
        return [f"python({step.cell}, {literal(step.source)})"]
    if step.kind == "shell":
        if not step.replayable:
            first = step.source.splitlines()[0][:80] if step.source else ""
            return [f"# not replayed ({step.not_replayed}): {first!r}"]
        options = ""
        if step.shell:
            options += f", shell={step.shell!r}"
        if step.workdir:
            options += f", workdir={step.workdir!r}"
        return [f"shell({literal(step.source)}{options})"]
    if step.kind == "message":
        # comments hold no NUL or control character (a NUL cannot even compile): escaped
        return [f"# agent: {terminal_safe(line)}" if line else "#" for line in step.source.strip().splitlines()[:20]]
    return [f"# not replayed: {step.tool!r} {step.source[:80]!r}"]


def build_script(start: dict[str, Any], steps: list[Step]) -> str:
    job = start["job"]
    inputs = [p for p in (job.get("inputs") or {}) if isinstance(p, str)]
    outputs = [o["path"] for o in job.get("outputs") or [] if isinstance(o, dict) and isinstance(o.get("path"), str)]
    counts = {kind: sum(1 for s in steps if s.kind == kind and s.replayable) for kind in ("python", "shell")}
    name = str(job.get("name", "job"))
    doc = [
        *UNTRUSTED,
        "",
        f"Replay of the coderoom run {name!r} without a model (made by `coderoom export --script`).",
        "",
        "Run it in a directory that holds the run's inputs at their workspace paths:",
        *[f"    {path}" for path in inputs],
        f"It runs the agent's {counts['python']} Python cells and {counts['shell']} shell commands",
        "in order, then checks that these outputs exist:",
        *[f"    {path}" for path in outputs],
        "`coderoom rerun RUN_DIR [--input NEW.csv=input/...]` runs it in a fresh sandbox.",
    ]
    lines = ["#!/usr/bin/env python3", '"""' + "\n".join(doc).replace('"""', "'''") + '\n"""', RUNTIME]
    lines.append("\ndef main():\n    reset()")
    for step in steps:
        if step.found_kernel_restarted:
            lines.append("    reset()  # the kernel had stopped before this cell")
        lines += [f"    {line}" for line in step_code(step)]
        if step.lost_state:
            lines.append("    reset()  # the kernel lost its variables here")
    lines.append(f"    return check({json.dumps(outputs)})")
    lines.append('\n\nif __name__ == "__main__":\n    sys.exit(main())\n')
    return "\n".join(lines)


def export_script(run_dir: Path, target: Path) -> Path:
    start, steps = load_steps(run_dir)
    source = build_script(start, steps)
    try:
        compile(source, str(target), "exec")  # never write a script that cannot run
    except (SyntaxError, ValueError) as exc:
        raise RecordError(f"{run_dir}: its record does not make a valid script ({exc})") from None
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(source, encoding="utf-8")
    target.chmod(0o755)
    return target
