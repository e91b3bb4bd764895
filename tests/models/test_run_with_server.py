"""A whole `coderoom` run in the default sandbox, driven by a scripted model in both wire formats.

The script has the agent run `env` (and read every visible process environment), write the
required outputs from the input, and answer. The run must succeed, extract the outputs, record
the calls, offer only plain function tools (what Chat Completions servers accept), and never let
the host's OPENAI_API_KEY into the sandbox or into anything sent back to the model.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from coderoom.jobs import build_job
from coderoom.record import read_record
from coderoom.run import run_job
from openai_server import Call, OpenAIServer, Reply, call, say, spec_for

CANARY = "sk-canary-3f9a1c77e2"
SHOW_ENV = "env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'"
WRITE = (
    "mkdir -p output && cp input/data.csv output/result.csv"
    " && printf '# Result\\n\\nCopied.\\n' > output/summary.md"
)


@pytest.mark.parametrize("api", ["chat_completions", "responses"])
async def test_scripted_run(api: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)  # the host's key: must stay in this process
    data = tmp_path / "data.csv"
    data.write_text("x,y\n1,2\n3,4\n")
    script = [
        call("exec_command", cmd=SHOW_ENV),
        call("exec_command", cmd=WRITE),
        say("Wrote both outputs."),
    ]
    # OpenAI (Responses) is sent the host key as its credential; a compatible server gets none.
    with OpenAIServer(script, api_key=CANARY if api == "responses" else "no-key") as server:
        job = build_job(
            {
                "name": "scripted",
                "prompt": "Copy input/data.csv to output/result.csv and write output/summary.md.",
                "inputs": {"input/data.csv": data},
                "outputs": ["output/result.csv", "output/summary.md"],
                "model": spec_for(api, server),
                "max_turns": 6,
            }
        )
        environ = {**os.environ, "OPENAI_BASE_URL": server.url, "CODEROOM_MODEL_MAX_RETRIES": "1"}
        result = await run_job(job, run_dir=tmp_path / "run", environ=environ)

    assert not server.errors, server.errors
    assert result.status == "ok", result.error
    assert result.final_output == "Wrote both outputs."
    assert (result.run_dir / "output/result.csv").read_text() == "x,y\n1,2\n3,4\n"
    assert (result.run_dir / "output/summary.md").read_text().startswith("# Result")

    events = read_record(result.run_dir).events
    label = "openai:gpt-5.4" if api == "responses" else job.model
    assert (events[0].type, events[0].model) == ("run_start", label)
    assert [e.turn for e in events if e.type == "model_call"] == [1, 2, 3]
    tools = [e for e in events if e.type == "tool_result"]
    assert [(t.name, t.arguments["cmd"]) for t in tools] == [
        ("exec_command", SHOW_ENV),
        ("exec_command", WRITE),
    ]
    assert "PATH=" in tools[0].output and CANARY not in tools[0].output
    assert events[-1].type == "run_end" and events[-1].status == "ok"

    assert len(server.requests) == 3
    expected_auth = f"Bearer {CANARY}" if api == "responses" else "Bearer no-key"
    for seen in server.requests:
        assert seen.headers["authorization"] == expected_auth
        # Chat Completions gets plain function tools; Responses also the SDK's defaults
        # (the custom apply_patch tool, and compaction); both backends keep terminals, so the
        # shell offers write_stdin to both
        if api == "responses":
            assert sorted(seen.tool_names) == ["apply_patch", "exec_command", "run_python", "view_image", "write_stdin"]
            assert {tool["type"] for tool in seen.body["tools"]} == {"function", "custom"}
            assert seen.body["context_management"][0]["type"] == "compaction"
        else:
            assert sorted(seen.tool_names) == ["exec_command", "run_python", "view_image", "write_stdin"]
            assert {tool["type"] for tool in seen.body["tools"]} == {"function"}
            assert "context_management" not in seen.body
        items = seen.body.get("input") if api == "responses" else seen.body["messages"]
        assert not [i for i in items if isinstance(i, dict) and i.get("type") == "compaction"]
        assert CANARY not in json.dumps(seen.body)
    env_output = server.requests[1].tool_outputs[0]
    assert "PATH=" in env_output and CANARY not in env_output


async def test_run_with_a_bad_key_ends_with_one_clear_line(tmp_path: Path) -> None:
    with OpenAIServer([], api_key="sk-the-right-one") as server:
        job = build_job({"prompt": "anything", "model": "gpt-5.4"})
        environ = {"OPENAI_API_KEY": "sk-a-wrong-one", "OPENAI_BASE_URL": server.url}
        result = await run_job(job, run_dir=tmp_path / "run", environ=environ)

    assert len(server.requests) == 1
    assert result.status == "error"
    assert result.error == (
        f"the model server at {server.url}/responses rejected the API key (401); check "
        "OPENAI_API_KEY (OpenAI) or OPENAI_COMPATIBLE_API_KEY (openai-compatible servers)"
    )
    assert read_record(result.run_dir).events[-1].error == result.error


PLOT = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('demo')"


@pytest.mark.parametrize("sees_images", [True, False])
async def test_chat_completions_model_sees_figures_when_it_reads_images(
    sees_images: bool, tmp_path: Path
) -> None:
    """Chat `tool` messages hold text only: figures follow them in a user message, as images."""
    script = [call("run_python", code=PLOT), say("Plotted.")]
    with OpenAIServer(script, api_key="no-key") as server:
        job = build_job({"prompt": "Plot something.", "model": spec_for("chat_completions", server), "max_turns": 4})
        environ = {
            **os.environ,
            "CODEROOM_MODEL_MAX_RETRIES": "1",
            "CODEROOM_MODEL_IMAGES": "1" if sees_images else "0",
        }
        result = await run_job(job, run_dir=tmp_path / "run", environ=environ)

    assert not server.errors, server.errors
    assert result.status == "ok", result.error
    messages = server.requests[1].body["messages"]
    tool_index = next(i for i, m in enumerate(messages) if m.get("role") == "tool")
    tool_text = _text_of(messages[tool_index]["content"])
    assert "figure" in tool_text.lower() and ".png" in tool_text
    after = messages[tool_index + 1 :]
    images = [
        part["image_url"]["url"]
        for message in after
        if message.get("role") == "user" and isinstance(message.get("content"), list)
        for part in message["content"]
        if part.get("type") == "image_url"
    ]
    if sees_images:
        assert len(images) == 1 and images[0].startswith("data:image/png;base64,")
        assert base64.b64decode(images[0].split(",", 1)[1]).startswith(b"\x89PNG\r\n\x1a\n")
    else:
        assert images == [] and "not shown" in tool_text


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))  # type: ignore[union-attr]


PATCH = "*** Begin Patch\n*** Add File: output/summary.md\n+# Result\n+\n+Patched.\n*** End Patch\n"


async def test_a_responses_model_writes_with_apply_patch_and_add_file_never_clobbers(tmp_path: Path) -> None:
    """The SDK's custom apply_patch tool, offered to Responses models, works in coderoom's
    sandbox; a second "Add File" of the same name is refused to the model, not applied."""
    clobber = PATCH.replace("Patched.", "Clobbered.")
    script = [
        Reply(calls=(Call("apply_patch", PATCH, custom=True),)),
        Reply(calls=(Call("apply_patch", clobber, custom=True),)),
        say("Wrote the summary."),
    ]
    with OpenAIServer(script, api_key=CANARY) as server:
        job = build_job(
            {
                "name": "patched",
                "prompt": "Write output/summary.md.",
                "outputs": ["output/summary.md"],
                "model": spec_for("responses", server),
                "max_turns": 4,
            }
        )
        environ = {**os.environ, "OPENAI_API_KEY": CANARY, "OPENAI_BASE_URL": server.url}
        result = await run_job(job, run_dir=tmp_path / "run", environ=environ)

    assert not server.errors, server.errors
    assert result.status == "ok", result.error
    assert (result.run_dir / "output/summary.md").read_text() == "# Result\n\nPatched."
    first, second = server.requests[1].tool_outputs[0], server.requests[2].tool_outputs[-1]
    assert "Created output/summary.md" in first
    assert "already exists" in second
