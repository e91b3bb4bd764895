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

from coderoom.sandboxes import SandboxSpec, backend_names, get_backend

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "security.md"
# what the host reads from a docker sandbox, and the bound on each (kept with the matrix)
DOCKER_ARCHIVE = (
    'Docker: archiving and helper commands. The host reads four things from a docker sandbox, e'
    "ach bounded: command replies on init.py's channel (each stream capped at Limits.output_byt"
    "es, or the read's max_bytes; a reply line longer than the largest reply the host asked for"
    ' ends the channel; every command has a wall-clock deadline, and the host waits 15 s past i'
    't at most); file reads (`read_file`: max_bytes, no symlink followed); the workspace archiv'
    'e; and `docker exec` output of the one long-lived process (the Python kernel, through the '
    "SDK's PTY bookkeeping). To archive, init.py (PID 1, undumpable; SIGKILL and SIGSTOP from i"
    'nside do not reach it, a SIGTERM from inside ends the session and no more) first SIGSTOPs '
    "and then SIGKILLs every other process in the container's PID namespace, found in /proc and"
    ' not through a pid file the sandbox could write (setsid, nohup, double-forked and SIGTERM-'
    'ignoring leftovers, and the kernel, alike), and refuses commands until the archive is done'
    ". The archiver then runs as a forked child of PID 1 (no execve: PID 1's stacked seccomp fi"
    'lter and undumpable flag, so no ptrace, /proc/PID/mem or replacement by sandbox code, whic'
    'h is dead anyway), and sums the apparent sizes of the regular files before reading one: a '
    'sparse `truncate -s 50G` (or a hard link counted once per name) passes workspace_size and '
    'is refused by name at once, with no byte read. The host parses the stream as it arrives (n'
    'o raw temp file), stops at a byte budget (workspace_size plus 12 KiB of tar framing per en'
    'try, at most 100,000 entries), writes one temp file of at most workspace_size of file cont'
    'ent, and gives the whole step a 600 s deadline after which the archiver is killed. Measure'
    'd by benchmarks/archive_sparse.py: a 4 GiB sparse file took 17.9 s and 4094 MiB of host te'
    'mp space before, and is refused in under 0.05 s with no host temp space now; tests/sandbox'
    '/test_docker_core.py has the attacks.'
)
# every backend coderoom offers, and the SDK's unconfined one as the baseline that must leak
BACKENDS = [(f"coderoom {name}", name) for name in backend_names()] + [("SDK unix_local", "unix_local")]
HAND_WRITTEN = "## Resource limits of the local sandbox"  # from here on, docs/security.md is kept


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
            "namespaces, read-only binds of the runtime, a synthetic /etc, the workspace (at "
            "Manifest.root, /workspace by default) the only writable host path) runs a launcher "
            "that holds capabilities only inside that user namespace. Each command is forked into fresh PID, mount and IPC namespaces with a fresh "
            "/proc, /tmp and /dev/shm, drops every capability, and gets no_new_privs, the seccomp "
            "filter and the rlimits before it starts. The launcher stays outside every command's "
            "PID namespace, is non-dumpable and talks to the host over an anonymous socket; "
            "tests/sandbox/test_local_launcher.py checks that commands see neither it nor each "
            "other, and that a lost launcher is replaced.",
            "",
            DOCKER_ARCHIVE,
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
