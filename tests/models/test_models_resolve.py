"""`--model` specs: each form, the defaults, plugins, and the errors a user sees for bad specs."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from agents import Model, OpenAIChatCompletionsModel, OpenAIResponsesModel

from coderoom.errors import ModelSpecError
from coderoom.models import DEFAULT_MODEL, resolve_model
from coderoom.models.resolve import OFFLINE_NOTICE

KEY = {"OPENAI_API_KEY": "sk-host"}


@pytest.mark.parametrize("spec", ["gpt-4.1", "openai:gpt-4.1"])
def test_openai_name_uses_responses_api(spec: str) -> None:
    resolved = resolve_model(spec, environ=KEY)
    assert isinstance(resolved.model.inner, OpenAIResponsesModel)
    assert resolved.model.inner.model == "gpt-4.1"
    assert (resolved.label, resolved.api) == ("openai:gpt-4.1", "responses")
    assert resolved.accepts_images and not resolved.tracing_disabled
    assert resolved.client is not None and resolved.client.api_key == "sk-host"
    assert str(resolved.client.base_url) == "https://api.openai.com/v1/"


def test_fine_tuned_openai_names_keep_their_colons() -> None:
    resolved = resolve_model("ft:gpt-4o-mini:acme::abc123", environ=KEY)
    assert resolved.label == "openai:ft:gpt-4o-mini:acme::abc123"


def test_openai_base_url_elsewhere_turns_trace_export_off() -> None:
    resolved = resolve_model("gpt-5.4", environ={**KEY, "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})
    assert resolved.tracing_disabled
    assert str(resolved.client.base_url) == "http://127.0.0.1:9/v1/"


def test_compatible_server_uses_chat_completions() -> None:
    resolved = resolve_model(
        "openai-compatible:llama3.1:8b@http://localhost:11434/v1/", environ=KEY
    )
    assert isinstance(resolved.model.inner, OpenAIChatCompletionsModel)
    assert resolved.model.inner.model == "llama3.1:8b"
    assert resolved.label == "openai-compatible:llama3.1:8b@http://localhost:11434/v1"
    assert resolved.api == "chat_completions"
    assert resolved.tracing_disabled and not resolved.accepts_images and resolved.notice is None
    # the host's OpenAI key is not the compatible server's key
    assert resolved.client.api_key == "no-key"


def test_compatible_key_comes_from_its_own_variable() -> None:
    environ = {**KEY, "OPENAI_COMPATIBLE_API_KEY": "vllm-secret"}
    resolved = resolve_model("openai-compatible:qwen@https://gpu.example:8000/v1", environ=environ)
    assert resolved.client.api_key == "vllm-secret"


@pytest.mark.parametrize(
    ("name", "environ", "images"),
    [
        ("llava:13b", {}, True),
        ("qwen2.5-vl", {}, True),
        ("llama3.1", {}, False),
        ("llama3.1", {"CODEROOM_MODEL_IMAGES": "1"}, True),
        ("llava", {"CODEROOM_MODEL_IMAGES": "0"}, False),
    ],
)
def test_compatible_image_support_is_guessed_and_overridable(
    name: str, environ: dict[str, str], images: bool
) -> None:
    resolved = resolve_model(f"openai-compatible:{name}@http://localhost:8080/v1", environ=environ)
    assert resolved.accepts_images is images


def test_compatible_url_without_path_gets_a_notice() -> None:
    resolved = resolve_model("openai-compatible:m@http://localhost:11434", environ={})
    assert resolved.notice is not None and "/v1" in resolved.notice


def test_offline() -> None:
    resolved = resolve_model("offline", environ=KEY)
    assert isinstance(resolved.model, Model)
    assert type(resolved.model).__name__ == "OfflineAnalyst"
    assert (resolved.label, resolved.api, resolved.accepts_images) == ("offline", "offline", False)
    assert resolved.tracing_disabled and resolved.notice is None


@pytest.mark.parametrize("spec", [None, "", "  "])
def test_default_with_a_key_is_openai(spec: str | None) -> None:
    resolved = resolve_model(spec, environ=KEY)
    assert resolved.label == f"openai:{DEFAULT_MODEL}" and resolved.notice is None


def test_default_without_a_key_is_offline_with_a_notice() -> None:
    resolved = resolve_model(None, environ={})
    assert resolved.label == "offline"
    assert resolved.notice == OFFLINE_NOTICE


def test_coderoom_model_sets_the_default_spec() -> None:
    environ = {**KEY, "CODEROOM_MODEL": "openai-compatible:phi4@http://127.0.0.1:1234/v1"}
    assert (
        resolve_model(None, environ=environ).label
        == "openai-compatible:phi4@http://127.0.0.1:1234/v1"
    )
    assert resolve_model("gpt-4.1", environ=environ).label == "openai:gpt-4.1"


def test_environ_defaults_to_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CODEROOM_MODEL", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-process")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert resolve_model(None).client.api_key == "sk-from-process"


@pytest.mark.parametrize(
    ("spec", "environ", "expected"),
    [
        ("openai-compatible:", {}, "openai-compatible:MODEL@BASE_URL"),
        ("openai-compatible", {}, "openai-compatible:MODEL@BASE_URL"),
        ("openai-compatible:llama3", {}, "openai-compatible:MODEL@BASE_URL"),
        ("openai-compatible:@http://localhost:11434/v1", {}, "openai-compatible:MODEL@BASE_URL"),
        ("openai-compatible:m@localhost:11434/v1", {}, "not an http(s) base URL"),
        ("openai-compatible:m@ftp://host/v1", {}, "not an http(s) base URL"),
        ("openai-compatible:m@http://host:port/v1", {}, "not an http(s) base URL"),
        ("openai-compatible:m@http://", {}, "not an http(s) base URL"),
        ("anthropic:claude", KEY, "unknown provider 'anthropic'"),
        ("offline:fast", KEY, "expected 'offline'"),
        ("openai:", KEY, "gpt-5.4"),
        ("gpt-5.4", {}, "OPENAI_API_KEY"),
        ("gpt-5.4", {**KEY, "OPENAI_BASE_URL": "api.openai.com"}, "OPENAI_BASE_URL"),
        ("gpt-5.4", {**KEY, "CODEROOM_MODEL_TIMEOUT": "soon"}, "CODEROOM_MODEL_TIMEOUT"),
        ("gpt-5.4", {**KEY, "CODEROOM_MODEL_MAX_RETRIES": "-1"}, "CODEROOM_MODEL_MAX_RETRIES"),
        ("gpt-5.4", {**KEY, "CODEROOM_MODEL_IMAGES": "maybe"}, "CODEROOM_MODEL_IMAGES"),
    ],
)
def test_invalid_specs_say_what_was_expected(
    spec: str, environ: dict[str, str], expected: str
) -> None:
    with pytest.raises(ValueError) as caught:
        resolve_model(spec, environ=environ)
    assert expected in str(caught.value)
    if "CODEROOM_MODEL_" not in expected:
        assert repr(spec.rstrip(":").split("@")[0])[1:-1] in str(caught.value)


def test_errors_never_quote_the_key() -> None:
    with pytest.raises(ValueError) as caught:
        resolve_model("openai-compatible:m@nowhere", environ={"OPENAI_API_KEY": "sk-secret-1"})
    assert "sk-secret-1" not in str(caught.value)


def test_plugin_providers_come_from_entry_points(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "fake_provider.py").write_text(
        textwrap.dedent(
            """
            from agents import OpenAIChatCompletionsModel
            from openai import AsyncOpenAI
            from coderoom.models import ResolvedModel

            def resolve(rest, environ):
                client = AsyncOpenAI(api_key="x", base_url="http://127.0.0.1:9/v1")
                return ResolvedModel(OpenAIChatCompletionsModel(rest, client), "fake:" + rest,
                                     "chat_completions", False, True, client=client)

            def hijack(rest, environ):
                raise AssertionError("a plugin must not replace a built-in provider")
            """
        )
    )
    dist = tmp_path / "coderoom_fake-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: coderoom-fake\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[coderoom.models]\n"
        "fake = fake_provider:resolve\n"
        "openai-compatible = fake_provider:hijack\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fake_provider", raising=False)
    assert resolve_model("fake:tiny", environ={}).label == "fake:tiny"
    compatible = resolve_model("openai-compatible:m@http://127.0.0.1:9/v1", environ={})
    assert compatible.label == "openai-compatible:m@http://127.0.0.1:9/v1"


def test_a_built_in_provider_is_resolved_without_reading_any_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading every installed distribution's entry points costs ~15 ms of each session's open;
    a built-in is found without it (no plugin may shadow one anyway)."""
    from coderoom.models import resolve

    def no_scan(**kwargs: object) -> None:
        raise AssertionError("entry points read for a built-in provider")

    monkeypatch.setattr(resolve, "entry_points", no_scan)
    assert resolve_model("offline", environ={}).label == "offline"
    with pytest.raises(AssertionError, match="entry points read"):  # an unknown prefix still looks
        resolve_model("someplugin:model", environ={})


def test_a_key_in_the_base_url_is_refused_without_echoing_it() -> None:
    """Attack A07: `MODEL@http://user:KEY@host` put the key in run.jsonl and on screen."""
    with pytest.raises(ModelSpecError) as error:
        resolve_model("openai-compatible:m@http://u:sk-canary-url@127.0.0.1:9/v1", environ={})
    assert "sk-canary-url" not in str(error.value) and "OPENAI_COMPATIBLE_API_KEY" in str(error.value)
