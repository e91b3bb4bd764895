"""Drive a real `coderoom run` process into a fault and see what it leaves behind.

The model is the loopback `OpenAIServer` (scripted replies, stalls); the sandbox is real; the
probes read what the host can see: the run folder, the record, the local session folders (by
their lease, so other runs on this machine never count) and Docker containers (by their
owner label), and processes still using a session folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coderoom.record import read_record
from coderoom.sandboxes.leases import read_lease
from openai_server import OpenAIServer, Step

COMMAND = [sys.executable, "-m", "coderoom"]
STAGE_TIMEOUT_S = 60.0


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "CODEROOM_MODEL"))}
    return {**env, "CODEROOM_MODEL_MAX_RETRIES": "0", **extra}


def events(run_dir: Path) -> list[dict[str, Any]]:
    """The run's events as plain dicts; none while the record is missing or being written."""
    try:
        return [event.model_dump(mode="json") for event in read_record(run_dir).events]
    except (FileNotFoundError, ValueError):
        return []


def local_folders(owner_pid: int) -> set[Path]:
    """Local session folders whose lease names `owner_pid`."""
    parent = Path(tempfile.gettempdir())
    found = set()
    for folder in parent.glob("coderoom-local-*"):
        lease = read_lease(folder)
        if lease is not None and lease.pid == owner_pid:
            found.add(folder)
    return found


def containers(owner_pid: int) -> set[str]:
    listing = ["docker", "ps", "-aq", "--filter", f"label=coderoom.host-pid={owner_pid}"]
    done = subprocess.run(listing, capture_output=True, text=True, timeout=30)
    return set(done.stdout.split())


def processes_using(folders: set[Path]) -> set[int]:
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if any(os.fsencode(f) in cmdline for f in folders):
            found.add(int(pid))
    return found


@dataclass
class Run:
    """One `coderoom run` subprocess and what it touched while alive."""

    process: subprocess.Popen[str]
    run_dir: Path
    backend: str
    seen_folders: set[Path] = field(default_factory=set)
    seen_containers: set[str] = field(default_factory=set)
    stderr: str = ""

    def wait_for(self, condition: Callable[[], bool], what: str, timeout: float = STAGE_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if self.process.poll() is not None:
                raise AssertionError(f"coderoom exited ({self.process.returncode}) before {what}: {self.finish()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {timeout} s")
            time.sleep(0.05)
        self.note_resources()

    def wait_for_event(self, predicate: Callable[[dict[str, Any]], bool], what: str) -> None:
        self.wait_for(lambda: any(predicate(e) for e in events(self.run_dir)), what)

    def note_resources(self) -> None:
        pid = self.process.pid
        self.seen_folders |= local_folders(pid)
        if self.backend == "docker":
            self.seen_containers |= containers(pid)

    def finish(self, timeout: float = STAGE_TIMEOUT_S) -> str:
        _, self.stderr = self.process.communicate(timeout=timeout)
        return self.stderr

    def leftovers(self) -> dict[str, Any]:
        """Everything of this run still on the host: must be empty once it has exited."""
        pid = self.process.pid
        folders = {f for f in self.seen_folders | local_folders(pid) if f.exists()}
        return {
            "folders": folders,
            "processes": processes_using(self.seen_folders | folders),
            "containers": containers(pid) if self.backend == "docker" else set(),
        }

    def last_event(self) -> dict[str, Any]:
        record = events(self.run_dir)
        assert record, f"no record in {self.run_dir}: {self.stderr}"
        return record[-1]


def start_run(
    server: OpenAIServer, run_dir: Path | None, backend: str, *args: str, cwd: Path | None = None
) -> Run:
    out = ["--out", str(run_dir)] if run_dir is not None else []
    process = subprocess.Popen(
        [*COMMAND, "run", "--sandbox", backend, "--model", f"openai-compatible:scripted@{server.url}",
         *out, *args],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=clean_env(), cwd=cwd,
    )  # fmt: skip
    return Run(process, run_dir or Path(), backend)


def no_leftovers(run: Run) -> None:
    """Leftovers may take a moment to go (a container's removal is asynchronous)."""
    deadline = time.monotonic() + 15
    while any(run.leftovers().values()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(run.leftovers().values()), run.leftovers()


def script(*steps: Step) -> list[Step]:
    return list(steps)


def tool_started(name: str, needle: str = "") -> Callable[[dict[str, Any]], bool]:
    def started(event: dict[str, Any]) -> bool:
        return event["type"] == "tool_start" and event["name"] == name and needle in json.dumps(event["arguments"])

    return started
