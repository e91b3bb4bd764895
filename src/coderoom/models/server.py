"""What an OpenAI-compatible server says about itself outside the OpenAI API.

The OpenAI API has no way to ask for a model's context size, its tokenizer or whether it reads
images; local servers answer elsewhere: llama.cpp at `GET /props` (`default_generation_settings.
n_ctx`, `modalities.vision`) and `POST /tokenize`, Ollama at `POST /api/show` (`num_ctx` in its
`parameters`, else the model's `*.context_length`). Those live at the server's root, not under
`/v1`. Every answer is hostile: read up to MAX_ANSWER_BYTES, each field type-checked, and any
failure (no such endpoint, not JSON, a wrong type) just means "the server does not say".
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

try:  # the HTTP library the installed `openai` client is built on (httpx, or its fork httpx2)
    import httpx2 as httpx
except ImportError:  # pragma: no cover - depends on the openai build
    import httpx  # type: ignore[no-redef, import-not-found, unused-ignore]

MAX_ANSWER_BYTES = 4_000_000
PROBE_TIMEOUT_S = 15.0
_NUM_CTX = re.compile(r"^\s*num_ctx\s+(\d{1,9})\s*$", re.MULTILINE)


@dataclass(frozen=True)
class ServerFacts:
    """What the server said; None where it did not say."""

    kind: str | None = None  # "llama.cpp" or "Ollama"
    context_size: int | None = None
    context_source: str = ""
    vision: bool | None = None
    tokenize: bool = False  # llama.cpp's /tokenize answers


class ServerProbe:
    """Asks the server at `base_url` (its OpenAI base, usually ending in /v1) about `model`."""

    def __init__(self, base_url: str, model: str, key: str) -> None:
        self.base_url = base_url
        self.root = base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url
        self.model = model
        self._headers = {"Authorization": f"Bearer {key}"}
        self._facts: ServerFacts | None = None

    async def facts(self) -> ServerFacts:
        """Asked once, then remembered: a server's context size does not change during a run."""
        if self._facts is None:
            self._facts = await self._ask()
        return self._facts

    async def count_tokens(self, text: str) -> int | None:
        """llama.cpp's own count of `text`'s tokens, or None when it cannot say."""
        answer = await self.request("POST", "/tokenize", {"content": text})
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        return len(tokens) if isinstance(tokens, list) else None

    async def request(self, method: str, path: str, body: Any = None, *, root: bool = True) -> Any:
        """The JSON answer of `method path` (at the root, or under the base URL), or None."""
        url = (self.root if root else self.base_url) + path
        try:
            async with httpx.AsyncClient(timeout=PROBE_TIMEOUT_S, headers=self._headers) as client:
                async with client.stream(method, url, json=body) as answer:
                    if answer.status_code != 200:
                        return None
                    data = bytearray()
                    async for chunk in answer.aiter_bytes():
                        data += chunk
                        if len(data) > MAX_ANSWER_BYTES:
                            return None
            return json.loads(data)
        except (httpx.HTTPError, ValueError, RecursionError):
            return None

    async def _ask(self) -> ServerFacts:
        props = await self.request("GET", "/props")
        if isinstance(props, dict) and ("default_generation_settings" in props or "n_ctx" in props):
            settings = props.get("default_generation_settings")
            n_ctx = _positive(settings.get("n_ctx") if isinstance(settings, dict) else None)
            n_ctx = n_ctx or _positive(props.get("n_ctx"))
            modalities = props.get("modalities")
            vision = modalities.get("vision") if isinstance(modalities, dict) else None
            return ServerFacts(
                kind="llama.cpp",
                context_size=n_ctx,
                context_source=f"{self.root}/props" if n_ctx else "",
                vision=vision if isinstance(vision, bool) else None,
                tokenize=await self.count_tokens("coderoom") is not None,
            )
        show = await self.request("POST", "/api/show", {"model": self.model})
        if isinstance(show, dict):
            capabilities = show.get("capabilities")
            vision = "vision" in capabilities if isinstance(capabilities, list) else None
            size, source = _ollama_context(show, f"{self.root}/api/show")
            return ServerFacts(kind="Ollama", context_size=size, context_source=source, vision=vision)
        return ServerFacts()


def _ollama_context(show: dict[str, Any], where: str) -> tuple[int | None, str]:
    """Ollama runs a model with `num_ctx` (its parameters) when set, else the model's own size."""
    parameters = show.get("parameters")
    found = _NUM_CTX.search(parameters) if isinstance(parameters, str) else None
    if found and _positive(int(found.group(1))):
        return int(found.group(1)), f"{where} num_ctx"
    info = show.get("model_info")
    if isinstance(info, dict):
        for key, value in info.items():
            if isinstance(key, str) and key.endswith(".context_length") and _positive(value):
                return value, f"{where} {key[:80]}"
    return None, ""


def _positive(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 < value < 100_000_000
    return value if ok else None
