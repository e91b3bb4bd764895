"""`coderoom run` and `coderoom show`: run a job with live progress; read a run back."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.markdown import Markdown
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from ..errors import EXIT_SIGINT, JobError, RecordError
from ..jobs import JOB_FILE, Job, build_job, load_job, parse_input_flag
from ..record import read_record
from ..sandboxes import backend_names, get_backend
from . import app
from ..hostile.text import terminal_safe
from .errors import reported

console = Console(stderr=True)
out = Console()


def _first_line(value: Any, limit: int = 90) -> str:
    if isinstance(value, dict):
        value = value.get("cmd") or value.get("code") or value.get("path") or json.dumps(value)
    line = str(value or "").strip().splitlines()[0] if str(value or "").strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


class Progress:
    """Turns record events into a live status line plus one printed line per tool call."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.started = time.monotonic()
        self.turn = 0
        self.tokens = 0
        self.doing = "starting the sandbox"
        self.status = console.status(self._text())

    def _text(self) -> str:
        elapsed = time.monotonic() - self.started
        return f"turn {self.turn} · {self.doing} · {elapsed:.1f}s · {self.tokens:,} tokens"

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "run_start":
            notice = event.get("notice")
            if notice:
                self.console.print(f"[yellow]{notice}[/]")
            self.console.print(f"model [bold]{event['model']}[/] · sandbox "
                               f"[bold]{event['job']['sandbox']['backend']}[/]")
        elif kind == "model_start":
            self.turn = event["turn"]
            self.doing = "model thinking"
        elif kind == "model_call":
            self.tokens += event["usage"]["total_tokens"]
            self.doing = "model answered"
        elif kind == "tool_start":
            self.doing = f"{event['name']}: {_first_line(event['arguments'], 50)}"
            self.console.print(
                f"[dim]{time.monotonic() - self.started:6.1f}s[/] turn {self.turn} "
                f"[cyan]{event['name']}[/] {_first_line(event['arguments'])}"
            )
        elif kind == "tool_result":
            self.doing = f"{event['name']} done"
        elif kind == "model_retry":
            self.console.print(
                f"[yellow]model server: {escape(terminal_safe(event['reason']))}; retry {event['attempt']} of "
                f"{event['max_retries']} in {event['wait_s']:g}s[/]", highlight=False
            )
        elif kind == "model_reply_cut":
            self.console.print(f"[yellow]the model's reply was cut at max_tokens={event['max_tokens']}"
                               + ("; asking it to finish[/]" if event["retried"] else "[/]"))
        elif kind == "nudge":
            missing = ", ".join(m["path"] for m in event["missing"])
            self.console.print(f"[yellow]outputs missing or invalid, asking the model again:[/] {missing}")
        self.status.update(self._text())


def _job_from_flags(
    target: Optional[str],
    prompt: Optional[str],
    inputs: list[str],
    outputs: list[str],
) -> Job:
    path = Path(target) if target else None
    if path is not None and (path.is_dir() or (path.suffix == ".toml" and path.exists())):
        job = load_job(path)
        if prompt:
            job = job.model_copy(update={"prompt": prompt})
        if inputs or outputs:
            data = job.model_dump()
            data["inputs"].update(dict(parse_input_flag(f) for f in inputs))
            data["outputs"] += [{"path": o} for o in outputs]
            job = build_job(data)
        return job
    request = prompt or target
    if not request:
        raise JobError(f"give a job folder (with {JOB_FILE}) or a prompt")
    return build_job(
        {
            "name": "run",
            "prompt": request,
            "inputs": dict(parse_input_flag(f) for f in inputs),
            "outputs": outputs,
        }
    )


def _apply_overrides(job: Job, **overrides: Any) -> Job:
    data = job.model_dump()
    sandbox, limits = data["sandbox"], data["sandbox"]["limits"]
    for key, value in overrides.items():
        if value is None:
            continue
        if key in ("model", "max_turns"):
            data[key] = value
        elif key in ("tool_choice", "max_tokens", "temperature"):
            data["model_settings"][key] = value
        elif key == "backend":
            sandbox["backend"] = value
        else:
            limits[key] = value
    return build_job(data)


@app.command()
def run(
    target: Annotated[Optional[str], typer.Argument(help="a job folder (coderoom.toml) or the prompt")] = None,
    prompt: Annotated[Optional[str], typer.Option("--prompt", "-p", help="the request (overrides the job's)")] = None,
    inputs: Annotated[list[str], typer.Option("--input", "-i", help="HOST=WORKSPACE, e.g. data/x.csv=input/x.csv")] = [],
    outputs: Annotated[list[str], typer.Option("--output", "-o", help="a required output, e.g. output/report.md")] = [],
    model: Annotated[Optional[str], typer.Option(help="OpenAI model name, openai-compatible:MODEL@URL, or offline")] = None,
    max_turns: Annotated[Optional[int], typer.Option(help="model turns allowed (default 25)")] = None,
    tool_choice: Annotated[Optional[str], typer.Option(help="auto | required | none | a tool name")] = None,
    max_tokens: Annotated[Optional[int], typer.Option(help="output tokens per model reply")] = None,
    temperature: Annotated[Optional[float], typer.Option(help="sampling temperature, 0-2")] = None,
    sandbox: Annotated[Optional[str], typer.Option(help=f"sandbox backend: {' | '.join(backend_names())}")] = None,
    memory: Annotated[Optional[str], typer.Option(help="sandbox memory, e.g. 2G")] = None,
    timeout: Annotated[Optional[float], typer.Option(help="seconds per command")] = None,
    network: Annotated[Optional[bool], typer.Option("--network/--no-network", help="allow network in the sandbox")] = None,
    out_dir: Annotated[Optional[Path], typer.Option("--out", help="where to save outputs and the record")] = None,
) -> None:
    """Run a job: the agent writes and runs code in a sandbox; validated artifacts come back."""
    from ..run import default_run_dir, run_job

    with reported():
        job = _job_from_flags(target, prompt, inputs, outputs)
        job = _apply_overrides(
            job, model=model, max_turns=max_turns, tool_choice=tool_choice, max_tokens=max_tokens,
            temperature=temperature, backend=sandbox, memory=memory,
            timeout=timeout, network=network,
        )
        run_dir = out_dir or default_run_dir(job)
        get_backend(job.sandbox.backend).prepare(
            job.sandbox, lambda line: console.print(f"[dim]{job.sandbox.backend}:[/] {line}", highlight=False)
        )
    progress = Progress(console)
    try:
        with progress.status, reported():
            result = asyncio.run(run_job(job, run_dir=run_dir, listeners=[progress], environ=dict(os.environ)))
    except KeyboardInterrupt:
        console.print(f"[red]interrupted[/]; the sandbox was closed. Partial record: {run_dir}")
        raise typer.Exit(EXIT_SIGINT) from None
    _print_summary(result.checks, result.final_output, run_dir)
    if result.error:
        console.print(f"[red]{result.status}:[/] {result.error}")
    raise typer.Exit(0 if result.ok else 1)


def _print_summary(checks: list[Any], final_output: str, run_dir: Path) -> None:
    table = Table(title=f"artifacts in {run_dir}", title_justify="left")
    table.add_column("path")
    table.add_column("size", justify="right")
    table.add_column("check")
    for check in checks:
        size = "-" if check.size is None else f"{check.size:,}"
        mark = "[green]ok[/]" if check.ok else "[red]FAIL[/]"
        table.add_row(check.path, size, f"{mark} {check.detail}")
    if checks:
        out.print(table)
    if final_output:
        out.print(Panel(Markdown(final_output), title="final message", title_align="left"))


@app.command()
def show(run_dir: Annotated[Path, typer.Argument(help="a run folder (holds run.jsonl)")]) -> None:
    """Print a readable transcript of a run."""
    with reported():
        try:
            events = read_record(run_dir)
        except FileNotFoundError:
            raise RecordError(f"{run_dir} has no run.jsonl") from None
    for event in events:
        _show_event(event)


def _show_event(event: dict[str, Any]) -> None:
    kind, stamp = event["type"], f"[dim]{event['t']:7.2f}s[/]"
    if kind == "run_start":
        job = event["job"]
        out.print(Panel(job["prompt"], title=f"{job['name']} · model {event['model']} · "
                        f"sandbox {job['sandbox']['backend']}", title_align="left"))
    elif kind == "model_call":
        usage = event["usage"]
        out.print(f"{stamp} [bold]turn {event['turn']}[/] model call "
                  f"({event['input_items']} items in, {usage['total_tokens']:,} tokens, {event['duration_s']}s)")
        for item in event["output"]:
            if item["kind"] == "message" and item["text"]:
                out.print(Panel(Markdown(item["text"]), title="assistant", title_align="left"))
    elif kind == "tool_result":
        arguments = event["arguments"]
        code = arguments.get("cmd") or arguments.get("code") if isinstance(arguments, dict) else arguments
        out.print(f"{stamp} [cyan]{event['name']}[/] ({event['duration_s']}s)")
        out.print(Panel(str(code or arguments), title="input", title_align="left", border_style="cyan"))
        out.print(Panel(event["output"] or "(no output)", title="result", title_align="left", border_style="dim"))
    elif kind == "nudge":
        out.print(f"{stamp} [yellow]nudge:[/] " + "; ".join(f"{m['path']} ({m['reason']})" for m in event["missing"]))
    elif kind == "run_end":
        status = event["status"]
        colour = "green" if status == "ok" else "red"
        out.print(f"{stamp} [{colour}]run {status}[/] in {event['duration_s']}s"
                  + (f": {event['error']}" if event.get("error") else ""))
        for check in event["outputs"]:
            out.print(f"  {'ok  ' if check['ok'] else 'FAIL'} {check['path']}: {check['detail']}")
