"""`coderoom export RUN_DIR --notebook FILE.ipynb`: the session as a Jupyter notebook.

Python cells from `run_python`, shell commands from `exec_command` as `%%bash` cells, the agent's
messages as markdown, each with the output the model saw and the figures (PNG read from
workspace.tar), in the order they happened.
"""

from __future__ import annotations

import base64
import re
import shlex
from pathlib import Path
from typing import Any

import nbformat
from nbformat import NotebookNode
from nbformat.v4 import (
    new_code_cell,
    new_markdown_cell,
    new_notebook,
    new_output,
)

from ..errors import RecordError
from ..hostile.archive import ArchiveError
from .script import UNTRUSTED
from .steps import WORKSPACE_ARCHIVE, Step, WorkspaceImages, load_steps

def _stream(name: str, text: str) -> NotebookNode:
    return new_output("stream", name=name, text=text if text.endswith("\n") else text + "\n")


def python_outputs(step: Step) -> list[NotebookNode]:
    """Notebook outputs from the recorded cell: streams, the value, the error, kernel notes."""
    cell = step.run
    if cell is None:  # the kernel could not be reached: what the model read is all there is
        return [_stream("stderr", step.output)] if step.output else []
    outputs = [_stream(name, text) for name, text in (("stdout", cell.stdout), ("stderr", cell.stderr)) if text]
    if cell.value is not None:
        outputs.append(new_output("execute_result", data={"text/plain": cell.value}, execution_count=cell.number))
    if cell.error is not None:
        lines = cell.error.rstrip("\n").split("\n")
        last = next((line for line in reversed(lines) if line.strip()), "Error")
        ename, _, evalue = last.partition(": ")
        outputs.append(new_output("error", ename=ename, evalue=evalue, traceback=lines))
    if cell.notes:
        outputs.append(_stream("stderr", "\n".join(f"[kernel] {note}" for note in cell.notes)))
    return outputs


def image_outputs(step: Step, images: WorkspaceImages) -> list[NotebookNode]:
    outputs = []
    for path in step.images:
        png = images.png(path)
        if png is not None:
            data = {"image/png": base64.b64encode(png).decode("ascii"), "text/plain": f"<figure {path}>"}
            outputs.append(new_output("display_data", data=data, metadata={"coderoom": {"path": path}}))
    return outputs


_PLAIN_WORD = re.compile(r"[A-Za-z0-9_./-]{1,64}")
_SCRIPT_LINK = re.compile(r"(?i)javascript:")


def shell_source(step: Step) -> str:
    """A shell step as a cell: the folder quoted for the shell (not for Python), and a shell
    named by one plain word only (anything else from a record falls back to bash)."""
    command = step.source if step.workdir is None else f"cd {shlex.quote(step.workdir)} || exit\n{step.source}"
    if step.shell and _PLAIN_WORD.fullmatch(step.shell):
        return f"%%script {step.shell}\n{command}"
    return f"%%bash\n{command}"


def inert_markdown(text: str) -> str:
    """Model text for a markdown cell, with nothing a notebook viewer would fetch or run: raw
    HTML shown as text, and image syntax shown as text (a remote image is a beacon)."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace("![", "!\\[")
    return _SCRIPT_LINK.sub("javascript&#58;", text)  # a link that would run code: shown, not followed


def step_cell(step: Step, images: WorkspaceImages) -> NotebookNode:
    if step.kind == "message":
        return new_markdown_cell(inert_markdown(step.source), metadata={"coderoom": {"kind": "message"}})
    if step.kind == "python":
        cell = new_code_cell(
            step.source,
            execution_count=step.cell,
            outputs=python_outputs(step) + image_outputs(step, images),
            metadata={"coderoom": {"tool": "run_python", "status": step.status}},
        )
        return cell
    if step.kind == "shell":
        text = step.output if step.output.endswith("\n") or not step.output else step.output + "\n"
        outputs = [new_output("stream", name="stdout", text=text)] if text else []
        if step.note:
            outputs.append(new_output("stream", name="stderr", text=step.note + "\n"))
        meta: dict[str, Any] = {"tool": "exec_command", "exit_code": step.exit_code}
        return new_code_cell(shell_source(step), outputs=outputs, metadata={"coderoom": meta})
    if step.kind == "image":
        png = images.png(step.source)
        body = f"*The agent looked at `{step.source}` (view_image).*"
        attachments = {}
        if png is not None:
            attachments["image.png"] = {"image/png": base64.b64encode(png).decode("ascii")}
            body += "\n\n![image](attachment:image.png)"
        cell = new_markdown_cell(body, metadata={"coderoom": {"tool": "view_image"}})
        if attachments:
            cell["attachments"] = attachments
        return cell
    fence = "~~~~"
    body = f"*Tool `{step.tool}`:* `{step.source}`\n\n{fence}\n{step.output}\n{fence}"
    return new_markdown_cell(body, metadata={"coderoom": {"tool": step.tool}})


def header_cell(start: dict[str, Any], run_dir: Path) -> NotebookNode:
    job = start["job"]
    inputs = job.get("inputs") if isinstance(job.get("inputs"), dict) else {}
    outputs = [o.get("path") for o in job.get("outputs") or [] if isinstance(o, dict)]
    prompt = "\n".join(f"> {line}" for line in str(job.get("prompt", "")).strip().splitlines())
    lines = [
        f"# coderoom run `{job.get('name', run_dir.name)}`",
        "",
        "**Warning:** " + " ".join(UNTRUSTED)[len("WARNING: ") :].replace("this script", "this notebook"),
        "",
        f"Model: `{start.get('model', '?')}`. Exported from `{run_dir.name}` by `coderoom export`.",
        "",
        "**Request**",
        "",
        prompt,
        "",
        "**Inputs** (workspace path): " + (", ".join(f"`{p}`" for p in inputs) or "none"),
        "",
        "**Outputs**: " + (", ".join(f"`{p}`" for p in outputs) or "none"),
        "",
        (
            "Run the cells in a copy of the workspace (the inputs at their workspace paths). "
            "Python cells ran in one persistent kernel; `%%bash` cells are the agent's shell commands."
        ),
    ]
    return new_markdown_cell("\n".join(lines), metadata={"coderoom": {"kind": "header"}})


def outputs_cell(start: dict[str, Any], images: WorkspaceImages) -> NotebookNode | None:
    """The declared outputs at the end, with the PNG ones shown."""
    declared = [o.get("path") for o in start["job"].get("outputs") or [] if isinstance(o, dict)]
    paths = [p for p in declared if isinstance(p, str)]
    if not paths:
        return None
    lines, attachments = ["**Outputs of the run**", ""], {}
    for index, path in enumerate(paths):
        lines.append(f"- `{path}`")
        png = images.png(path)
        if png is not None:
            name = f"output-{index}.png"
            attachments[name] = {"image/png": base64.b64encode(png).decode("ascii")}
            lines += ["", f"  ![{path}](attachment:{name})"]
    cell = new_markdown_cell("\n".join(lines), metadata={"coderoom": {"kind": "outputs"}})
    if attachments:
        cell["attachments"] = attachments
    return cell


def build_notebook(run_dir: Path) -> NotebookNode:
    """The notebook of a run directory, validated against nbformat v4."""
    start, steps = load_steps(run_dir)
    try:
        images = WorkspaceImages(run_dir)
    except ArchiveError as exc:
        raise RecordError(f"{run_dir / WORKSPACE_ARCHIVE}: {exc}") from None
    try:
        cells = [header_cell(start, run_dir)] + [step_cell(step, images) for step in steps]
        final = outputs_cell(start, images)
        if final is not None:
            cells.append(final)
    finally:
        images.close()
    notebook = new_notebook(
        cells=cells,
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python"},
            "coderoom": {"job": start["job"].get("name"), "model": start.get("model")},
        },
    )
    nbformat.validate(notebook)
    return notebook


def export_notebook(run_dir: Path, target: Path) -> Path:
    notebook = build_notebook(run_dir)
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, str(target))
    return target
