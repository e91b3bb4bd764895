"""A real llama.cpp `llama-server` on 127.0.0.1, for tests of the real wire.

Why: the scripted server (openai_server.py) shows what coderoom does with each fault; only a real
server shows that coderoom's requests are accepted by a real parser, validator and chat template,
and what a real small model does with them (SmolLM2-135M makes real tool-call mistakes).
`.ci/llama-setup.sh` provides the binary, the model and the template and exports their paths;
without them the tests skip, unless CODEROOM_REQUIRE_LLAMA=1 (as in CI), where they fail.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

VARS = ("CODEROOM_LLAMA_SERVER", "CODEROOM_LLAMA_MODEL", "CODEROOM_LLAMA_TEMPLATE")
ALIAS = "smollm2"


@dataclass
class LlamaServer:
    """A running llama-server; `url` is its OpenAI base URL, `spec` the --model that reaches it."""

    process: subprocess.Popen[bytes]
    port: int
    n_ctx: int
    log: Path

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.root}/v1"

    @property
    def spec(self) -> str:
        return f"openai-compatible:{ALIAS}@{self.url}"

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.root + path, timeout=10) as answer:
            return json.loads(answer.read())

    def post(self, path: str, body: dict[str, Any]) -> Any:
        request = urllib.request.Request(
            self.root + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=120) as answer:
            return json.loads(answer.read())

    def count_tokens(self, text: str) -> int:
        return len(self.post("/tokenize", {"content": text})["tokens"])


def llama_paths() -> tuple[Path, Path, Path]:
    """The exported paths, or a skip (a failure under CODEROOM_REQUIRE_LLAMA=1) naming what's missing."""
    missing = [name for name in VARS if not Path(os.environ.get(name, "")).is_file()]
    if missing:
        reason = f"llama.cpp not provided ({', '.join(missing)} unset or absent; see .ci/llama-setup.sh)"
        if os.environ.get("CODEROOM_REQUIRE_LLAMA") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    server, model, template = (Path(os.environ[name]) for name in VARS)
    return server, model, template


def start_llama(log: Path, *, n_ctx: int = 4096, threads: int = 2) -> LlamaServer:
    server, model, template = llama_paths()
    port = _free_port()
    command = [
        str(server), "-m", str(model), "-a", ALIAS, "--host", "127.0.0.1", "--port", str(port),
        "-t", str(threads), "-c", str(n_ctx), "-np", "1", "--jinja",
        "--chat-template-file", str(template), "--no-webui",
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    running = LlamaServer(process, port, n_ctx, log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"llama-server exited {process.returncode}: {log.read_text()[-2000:]}")
        try:
            if running.get("/health").get("status") == "ok":
                return running
        except OSError:
            pass
        time.sleep(0.1)
    stop_llama(running)
    raise RuntimeError(f"llama-server not ready in 60 s: {log.read_text()[-2000:]}")


def stop_llama(running: LlamaServer) -> None:
    running.process.terminate()
    try:
        running.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        running.process.kill()
        running.process.wait()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
