"""OpenAI models over the Responses API; the key comes from OPENAI_API_KEY, stays in this process.

Traces go to OpenAI only when the endpoint is OpenAI's own: with OPENAI_BASE_URL pointing anywhere
else (a proxy, a test server) tracing export is disabled so nothing leaves for a third host.
"""

from __future__ import annotations

from collections.abc import Mapping

from agents import OpenAIResponsesModel
from agents.models.openai_client_utils import is_official_openai_base_url
from openai import AsyncOpenAI

from ..errors import ModelSpecError
from .base import ResolvedModel, check_base_url, client_settings, http_model, images_override
from .transport import bounded_http_client

DEFAULT_MODEL = "gpt-5.4"
OPENAI_URL = "https://api.openai.com/v1"
FORM = "an OpenAI model name such as gpt-5.4 (or openai:gpt-5.4)"


def resolve(name: str, environ: Mapping[str, str]) -> ResolvedModel:
    name = name.strip()
    spec = f"openai:{name}"
    if not name:
        raise ModelSpecError(f"model {spec!r} has no model name; expected {FORM}")
    key = environ.get("OPENAI_API_KEY", "").strip()
    if not key:
        raise ModelSpecError(
            f"model {spec!r} needs OPENAI_API_KEY in the environment; set it, "
            "or use --model offline, or --model openai-compatible:MODEL@BASE_URL for a local server"
        )
    base_url = check_base_url(
        environ.get("OPENAI_BASE_URL") or OPENAI_URL, spec, "OPENAI_BASE_URL=https://HOST/v1"
    )
    _, timeout = client_settings(environ)
    client = AsyncOpenAI(
        api_key=key,
        base_url=base_url,
        organization=environ.get("OPENAI_ORG_ID") or None,
        project=environ.get("OPENAI_PROJECT_ID") or None,
        # per read; the whole-request deadline (GuardedModel) is the bound that acts first
        timeout=timeout + 1,
        http_client=bounded_http_client(),  # answers bounded in bytes as they arrive
    )
    override = images_override(environ)
    return http_model(
        OpenAIResponsesModel(model=name, openai_client=client, model_is_explicit=True),
        label=spec,
        api="responses",
        accepts_images=True if override is None else override,
        tracing_disabled=not is_official_openai_base_url(base_url),
        client=client,
        environ=environ,
    )
