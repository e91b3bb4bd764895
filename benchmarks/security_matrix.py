#!/usr/bin/env python3
"""Run the attack-catalogue probes on each backend and print (or write) the outcome matrix.

Measured, not asserted: each cell is what the probe printed, marked safe or UNSAFE against the
catalogue's expected outcome. The probes are the ones the test-suite uses
(tests/sandbox/probes.py). On the SDK's unconfined `unix_local` only the probes that are
harmless on a real host run (the others would, e.g., ptrace or unshare the harness itself).

    python benchmarks/security_matrix.py [--write]      # --write: docs/security.md
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import platform
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from coderoom.sandboxes import SandboxSpec, get_backend

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "security.md"
HAND_WRITTEN = "## Resource limits of the local sandbox"  # from here on, docs/security.md is kept
BACKENDS = [("coderoom local", "local"), ("SDK unix_local", "unix_local"), ("coderoom docker", "docker")]


def _load_probes():  # the tests' module, by path: one definition of the probes
    spec = importlib.util.spec_from_file_location("probes", ROOT / "tests" / "sandbox" / "probes.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["probes"] = module
    spec.loader.exec_module(module)
    return module


def _available(name: str) -> str | None:
    try:
        return get_backend(name, unconfined_no_isolation=name == "unix_local").unavailable_reason(
            SandboxSpec(backend=name)
        )
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def _cell(probe, backend: str, run) -> str:
    if run is None:
        return "not run (unsafe on an unconfined host)"
    shown = (run.stdout.strip() or f"exit {run.exit_code}").replace("|", "\\|").replace("\n", " ")[:60]
    shown = shown.replace("sk-canary", "<canary>")  # keep canary strings out of the docs
    verdict = "safe" if probe.passes(backend, run.stdout) and not run.leaked() else "**UNSAFE**"
    return f"{verdict}: `{shown}`"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"write {DOCS}")
    args = parser.parse_args()
    probes = _load_probes()
    columns = [(label, name) for label, name in BACKENDS if _available(name) is None]
    missing = [f"{label} ({_available(name)})" for label, name in BACKENDS if _available(name) is not None]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for probe in probes.PROBES:
            cells = []
            for _, name in columns:
                if name == "unix_local" and not probe.baseline:
                    cells.append(_cell(probe, name, None))
                    continue
                with probes.Canaries(Path(tmp) / f"{probe.id}-{name}") as tokens:
                    run = await probes.run_probe(name, probe, tokens)
                cells.append(_cell(probe, name, run))
            rows.append(f"| {probe.id} | {probe.title} | " + " | ".join(cells) + " |")
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    header = "| case | attack | " + " | ".join(label for label, _ in columns) + " |"
    text = "\n".join(
        [
            "# Security matrix: the attack catalogue, measured",
            "",
            f"Measured {stamp} on {platform.node()}: Linux {platform.release()}, Python "
            f"{platform.python_version()}, {platform.machine()}. Made by "
            "`python benchmarks/security_matrix.py --write`; the probes are tests/sandbox/probes.py, "
            "the expected safe outcomes are the catalogue's (../shared/security/attack-catalogue.md).",
            "Each cell: safe/UNSAFE against that outcome, and what the probe printed. Multi-step cases "
            "(orphans, timeouts, copy-out, tar extraction, session lifecycle) are in "
            "tests/sandbox/test_attack_catalogue.py.",
            "",
            "How coderoom local isolates: one bubblewrap per session (user, network, UTS and cgroup "
            "namespaces, read-only binds of the runtime, a synthetic /etc, /workspace the only "
            "writable host path) runs a launcher that holds capabilities only inside that user "
            "namespace. Each command is forked into fresh PID, mount and IPC namespaces with a fresh "
            "/proc, /tmp and /dev/shm, drops every capability, and gets no_new_privs, the seccomp "
            "filter and the rlimits before it starts. The launcher stays outside every command's "
            "PID namespace, is non-dumpable and talks to the host over an anonymous socket; "
            "tests/sandbox/test_local_launcher.py checks that commands see neither it nor each "
            "other, and that a lost launcher is replaced.",
            "",
            header,
            "|---|---|" + "---|" * len(columns),
            *rows,
            "",
            *(["Not measured: " + "; ".join(missing), ""] if missing else []),
        ]
    )
    print(text)
    if args.write:  # the hand-written sections after the matrix are kept
        kept = DOCS.read_text().partition(HAND_WRITTEN)[1:] if DOCS.exists() else ("", "")
        DOCS.write_text(text + ("\n" + "".join(kept) if kept[0] else ""))


if __name__ == "__main__":
    asyncio.run(main())
