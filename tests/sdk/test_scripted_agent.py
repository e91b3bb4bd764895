"""Issue 12's scripted scenario: a SandboxAgent with the SDK's DEFAULT capabilities, run with
`SandboxRunConfig(client=<the backend's client>)`, driven by `agents.testing`'s ScriptedModel
through exec_command, a command that outlives its yield_time_ms (4 s against 1 s: the model's
own setting, not the SDK's 10 s default) polled with write_stdin, an interactive tty program,
apply_patch, view_image, and a pause on approval resumed from RunState JSON. Every step must
pass on coderoom's backends as it does on the SDK's UnixLocal, the baseline.

The model's later steps read the tool results they depend on (the session ids) from the input
the runner sends, as a real model would.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, RunState, function_tool
from agents.sandbox import SandboxAgent, SandboxRunConfig
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from openai.types.responses import ResponseCustomToolCall

from backends import BACKENDS, require_backend
from coderoom.sandboxes import SandboxSpec, get_backend

BASELINE = "unix_local"
# a 1x1 PNG, written by a command, shown by view_image
PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d4944415478da63f8cfc0f01f0005000201a5f5c8d10000000049454e44ae426082"
    )
).decode()
PATCH = "*** Begin Patch\n*** Add File: notes/plan.txt\n+first line\n+second line\n*** End Patch\n"
PROMPT = "python3 -c \"import sys; print(sys.stdin.isatty()); print('hello', input('name? '))\""
_SESSION = re.compile(r"Process running with session ID (\d+)")


def last_output(call: ModelCall) -> str:
    """The newest tool result the runner sent the model."""
    for item in reversed(call.input):
        if isinstance(item, dict) and item.get("type") in ("function_call_output", "custom_tool_call_output"):
            output = item["output"]
            return output if isinstance(output, str) else json.dumps(output)
    raise AssertionError("no tool output in the model's input")


def poll(call_id: str, **args: Any) -> ModelStep:
    """write_stdin to the session the previous exec_command opened."""

    def respond(call: ModelCall) -> list[Any]:
        match = _SESSION.search(last_output(call))
        assert match, f"no session id in {last_output(call)!r}"
        return [function_call("write_stdin", {"session_id": int(match.group(1)), **args}, call_id=call_id)]

    return ModelStep.respond(respond)


@function_tool(needs_approval=True)
def publish(summary: str) -> str:
    """Publish the summary (a person approves it first)."""
    return f"published: {summary}"


def steps() -> list[Any]:
    return [
        [function_call("exec_command", {"cmd": "echo hello from $(id -un)"}, call_id="c1")],
        [function_call("exec_command", {"cmd": "echo started; sleep 4; echo finished", "yield_time_ms": 1000}, call_id="c2")],
        poll("c3", chars="", yield_time_ms=30_000),
        [function_call("exec_command", {"cmd": PROMPT, "tty": True, "yield_time_ms": 3000}, call_id="c4")],
        poll("c5", chars="Ada\n", yield_time_ms=3000),
        [ResponseCustomToolCall(type="custom_tool_call", call_id="c6", name="apply_patch", input=PATCH)],
        [function_call("exec_command", {"cmd": f"echo {PNG} | base64 -d > dot.png; cat notes/plan.txt"}, call_id="c7")],
        [function_call("view_image", {"path": "dot.png"}, call_id="c8")],
        [function_call("publish", {"summary": "done"}, call_id="c9")],
        [assistant_message("all steps done")],
    ]


def client_for(backend: str) -> tuple[Any, Any]:
    if backend == BASELINE:
        from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClient

        return UnixLocalSandboxClient(), None
    require_backend(backend)
    return get_backend(backend).client(SandboxSpec(backend=backend))


def outputs(result: Any) -> dict[str, str]:
    """Each tool call's result text by call id."""
    found = {}
    for item in result.to_input_list():
        if isinstance(item, dict) and item.get("type") in ("function_call_output", "custom_tool_call_output"):
            output = item["output"]
            found[item["call_id"]] = output if isinstance(output, str) else json.dumps(output)
    return found


@pytest.mark.parametrize("backend", [BASELINE, *BACKENDS])
async def test_the_scripted_scenario(backend: str) -> None:
    client, options = client_for(backend)
    model = ScriptedModel(steps())
    agent: Agent[Any] = SandboxAgent(name="scripted", instructions="Work in the sandbox.", model=model, tools=[publish])
    config = RunConfig(sandbox=SandboxRunConfig(client=client, options=options), tracing_disabled=True)
    paused = await Runner.run(agent, "do the steps", run_config=config, max_turns=20)
    assert [item.raw_item.call_id for item in paused.interruptions] == ["c9"]  # publish waits for approval
    tools = {tool.name for tool in model.calls[0].tools}
    assert {"exec_command", "write_stdin", "apply_patch", "view_image"} <= tools

    state = await RunState.from_json(agent, json.loads(json.dumps(paused.to_state().to_json())))
    state.approve(state.get_interruptions()[0])
    result = await Runner.run(agent, state, run_config=config, max_turns=20)
    model.assert_complete()
    assert result.final_output == "all steps done"

    seen = {**outputs(paused), **outputs(result)}
    assert "hello from" in seen["c1"]
    assert "Process running with session ID" in seen["c2"] and seen["c2"].endswith("started\n")
    assert "Process exited with code 0" in seen["c3"] and seen["c3"].endswith("finished\n")
    assert seen["c4"].endswith("True\r\nname? ")
    assert seen["c5"].endswith("hello Ada\r\n")
    assert "notes/plan.txt" in seen["c6"]
    assert seen["c7"].rstrip("\n").endswith("first line\nsecond line")
    assert "image" in seen["c8"] and "data:image/png;base64," in seen["c8"]
    assert seen["c9"] == "published: done"
