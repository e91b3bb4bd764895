"""OpenAI-compatible Chat Completions servers (Ollama, vLLM, llama.cpp, LM Studio): MODEL@BASE_URL.

The key, if the server wants one, comes from OPENAI_COMPATIBLE_API_KEY, never from OPENAI_API_KEY,
so a host's OpenAI key is not sent to a third-party server. Tracing export is always off: the run's
data should not travel to OpenAI when the user chose a local model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import urlsplit

from agents import OpenAIChatCompletionsModel
from openai import AsyncOpenAI

from ..errors import ModelSpecError
from .base import ResolvedModel, check_base_url, client_settings, http_model, images_override
from .stream_end import whole_streams
from .transport import bounded_http_client
from .wire import with_text_content
from .server import ServerProbe

FORM = "openai-compatible:MODEL@BASE_URL, e.g. openai-compatible:llama3.1@http://localhost:11434/v1"
KEY_VAR = "OPENAI_COMPATIBLE_API_KEY"
# Servers that ignore auth still get a bearer header; the openai client insists on one.
NO_KEY = "no-key"
_VISION = re.compile(r"vision|llava|vl\b|pixtral|gemma3|minicpm-v|moondream|gpt-4o|gpt-4\.1|gpt-5")


def resolve(rest: str, environ: Mapping[str, str]) -> ResolvedModel:
    spec = f"openai-compatible:{rest}"
    name, at, url = rest.partition("@")
    name = name.strip()
    if not at or not name or not url.strip():
        raise ModelSpecError(f"model {spec!r} is incomplete; expected {FORM}")
    base_url = check_base_url(url, spec, FORM)
    _, timeout = client_settings(environ)
    key = environ.get(KEY_VAR, "").strip() or NO_KEY
    client = AsyncOpenAI(
        api_key=key,
        base_url=base_url,
        # per read; the whole-request deadline (GuardedModel) is the bound that acts first
        timeout=timeout + 1,
        http_client=bounded_http_client(),  # answers bounded in bytes as they arrive
        # Explicit, so an Authorization in the host's OPENAI_CUSTOM_HEADERS cannot replace it.
        default_headers={"Authorization": f"Bearer {key}"},
    )
    # The client fills these from the host's OPENAI_ORG_ID / OPENAI_PROJECT_ID; they are OpenAI's.
    client.organization = None
    client.project = None
    with_text_content(client)  # "" rather than null content: some servers refuse null
    whole_streams(client)  # a stream that ends before its reply is a cut connection, retried
    override = images_override(environ)
    notice = None
    if urlsplit(base_url).path in ("", "/"):
        notice = (
            f"{base_url} has no path; OpenAI-compatible servers usually serve under /v1 ({FORM})"
        )
    return http_model(
        # tool-call arguments streamed as they come (the SDK's default), so they count as they arrive
        OpenAIChatCompletionsModel(model=name, openai_client=client),
        label=f"openai-compatible:{name}@{base_url}",
        api="chat_completions",
        accepts_images=bool(_VISION.search(name.lower())) if override is None else override,
        tracing_disabled=True,
        notice=notice,
        client=client,
        environ=environ,
        probe=ServerProbe(base_url, name, key),
        cap_from_context=True,  # a local server generates until the context is full otherwise
    )
