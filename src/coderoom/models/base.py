"""What every provider returns, and the client settings they share.

The `openai` client's own retries are off: the SDK's runner retries instead, with coderoom's
policy (`settings.retry_policy`: bounded, reported, never a request that is wrong), up to
CODEROOM_MODEL_MAX_RETRIES times. CODEROOM_MODEL_TIMEOUT bounds each request as a whole
(`guard.GuardedModel`), not only each read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from agents import Model
from openai import AsyncOpenAI

from ..errors import ModelSpecError
from .budget import ModelBudget
from .failures import Notify
from .options import Api
from .server import ServerProbe


DEFAULT_TIMEOUT_S = 600.0
DEFAULT_MAX_RETRIES = 5


class DecliningModel(Model):
    """A model that can answer that a request is outside what it does (the offline analyst):
    `declined` holds that answer after its last reply, else None. A run then fails at once,
    without a nudge: the same request would get the same answer."""

    declined: str | None = None


@dataclass
class ResolvedModel:
    """An SDK Model plus what the runner needs to know about it."""

    model: Model
    label: str
    api: Api
    accepts_images: bool
    tracing_disabled: bool
    notice: str | None = None
    client: AsyncOpenAI | None = field(default=None, repr=False)
    max_retries: int = 0
    probe: ServerProbe | None = field(default=None, repr=False)  # the server's own facts, if any
    budget: ModelBudget | None = field(default=None, repr=False)  # slots shared with other runs (`budget`)

    def declined(self) -> str | None:
        """The model's last answer if it declined the request (see `DecliningModel`), else None."""
        return self.model.declined if isinstance(self.model, DecliningModel) else None

    def agent_model(self, notify: Notify, context_size: int | None) -> Model:
        """The SDK Model one agent is built with: a guarded HTTP model made for that run
        (reporting through its `notify`, fitted to its job's declared `context_size` when the
        server does not say, its requests within `budget`), the resolved one left as it is; any
        other model itself (it sends no request to bound)."""
        from .guard import GuardedModel

        if isinstance(self.model, GuardedModel):
            return self.model.for_run(notify, context_size, self.budget)
        return self.model

    async def aclose(self) -> None:
        """Close the HTTP client (the SDK's HTTP models don't own theirs)."""
        if self.client is not None:
            await self.client.close()


def http_model(
    inner: Model,
    *,
    client: AsyncOpenAI,
    environ: Mapping[str, str],
    probe: ServerProbe | None = None,
    cap_from_context: bool = False,
    **fields: Any,
) -> ResolvedModel:
    """A ResolvedModel for an `openai` client's model: its retries moved to the runner, each
    request bounded by the whole-request deadline and fitted into the context `probe` reports,
    its output capped by CODEROOM_MODEL_MAX_TOKENS (or, `cap_from_context`, by the context)."""
    from .context import ContextGuard
    from .guard import GuardedModel
    from .output_cap import max_tokens_from_env

    max_retries, timeout = client_settings(environ)
    client.max_retries = 0
    server = str(client.base_url).rstrip("/")
    guarded = GuardedModel(
        inner, server, deadline_s=timeout, context=ContextGuard(server, probe),
        max_tokens=max_tokens_from_env(environ), cap_from_context=cap_from_context,
    )
    return ResolvedModel(model=guarded, client=client, max_retries=max_retries, probe=probe, **fields)


def client_settings(environ: Mapping[str, str]) -> tuple[int, float]:
    """(max_retries, timeout seconds) from CODEROOM_MODEL_MAX_RETRIES / CODEROOM_MODEL_TIMEOUT."""
    retries = _number(environ, "CODEROOM_MODEL_MAX_RETRIES", DEFAULT_MAX_RETRIES, int)
    timeout = _number(environ, "CODEROOM_MODEL_TIMEOUT", DEFAULT_TIMEOUT_S, float)
    if retries < 0 or timeout <= 0:
        raise ModelSpecError("CODEROOM_MODEL_MAX_RETRIES must be >= 0 and CODEROOM_MODEL_TIMEOUT > 0")
    return int(retries), float(timeout)


def _number(environ: Mapping[str, str], name: str, default: float, kind: type) -> float:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return kind(raw)
    except ValueError:
        raise ModelSpecError(f"{name}={raw!r} is not a number") from None


def images_override(environ: Mapping[str, str]) -> bool | None:
    """CODEROOM_MODEL_IMAGES=1/0 overrides the guess of whether the model can look at images."""
    raw = environ.get("CODEROOM_MODEL_IMAGES", "").strip().lower()
    if not raw:
        return None
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ModelSpecError(f"CODEROOM_MODEL_IMAGES={raw!r}: expected 1 or 0")


def check_base_url(url: str, spec: str, expected: str) -> str:
    """An http(s) URL with a host, without its trailing slash; else ValueError naming `spec`."""
    error = ModelSpecError(
        f"model {spec!r}: {url.strip()!r} is not an http(s) base URL; expected {expected}"
    )
    url = url.strip().rstrip("/")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises ValueError on a bad port)
    except ValueError:
        raise error from None
    if parts.username is not None or parts.password is not None:  # named without echoing it
        raise ModelSpecError(
            "the model's base URL holds credentials (user:key@host), which would be recorded and "
            "shown; give the key in OPENAI_COMPATIBLE_API_KEY (or OPENAI_API_KEY) instead"
        )
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise error
    return url
