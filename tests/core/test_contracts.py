"""Contracts between coderoom's parts are declared, not probed by name.

A model that declines says so through `models.base.DecliningModel`, a tool with a structured
result through `record.hooks.KeepsCells`; the Agents SDK's private `_inner` is read in one
adapter module (`sandboxes/sdk_session_adapter.py`), so an SDK release that renames it breaks
there only; and an agent gets a model made for its run instead of changing the resolved one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import coderoom
from coderoom.agent import build_agent
from coderoom.jobs import build_job
from coderoom.models import resolve_model
from coderoom.models.base import DecliningModel
from coderoom.models.guard import GuardedModel
from coderoom.record.hooks import KeepsCells
from coderoom.tools.python_kernel import RunPythonTool

PACKAGE = Path(coderoom.__file__).parent
SDK_SESSION_ADAPTER = PACKAGE / "sandboxes" / "sdk_session_adapter.py"
PROBED_BY_NAME = {"declined", "take_cell", "limits_hit", "_inner", "notify"}


def _sources() -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text(encoding="utf-8"))) for path in sorted(PACKAGE.rglob("*.py"))]


def test_the_sdk_sessions_private_inner_is_read_only_by_its_adapter() -> None:
    readers = {
        path
        for path, tree in _sources()
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr == "_inner"
        and not (isinstance(node.value, ast.Name) and node.value.id == "self")  # a class's own `_inner`
    }
    assert readers == {SDK_SESSION_ADAPTER}


def test_no_contract_is_probed_with_getattr() -> None:
    probes = [
        f"{path.relative_to(PACKAGE)}:{node.lineno}"
        for path, tree in _sources()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
        and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in PROBED_BY_NAME
    ]
    assert probes == []


def test_the_contracts_are_declared_by_the_types_that_keep_them() -> None:
    assert issubclass(RunPythonTool, KeepsCells)
    offline = resolve_model("offline", environ={})
    assert isinstance(offline.model, DecliningModel) and offline.declined() is None
    offline.model.declined = "not what I do"
    assert offline.declined() == "not what I do"


async def test_an_agent_gets_a_model_made_for_its_run_and_the_resolved_one_is_untouched() -> None:
    resolved = resolve_model("openai-compatible:tiny@http://127.0.0.1:9/v1", environ={})  # never contacted
    job = build_job({"prompt": "p", "model": {"spec": "x", "context_size": 512}})
    heard: list[str] = []

    def notify(kind: str, **_fields: object) -> None:
        heard.append(kind)

    try:
        agent = build_agent(job, resolved, notify)
        assert isinstance(agent.model, GuardedModel) and agent.model is not resolved.model
        assert agent.model.context.declared == 512 and agent.model.inner is resolved.model.inner
        agent.model.notify("model_reply_cut")
        assert heard == ["model_reply_cut"]
        assert isinstance(resolved.model, GuardedModel) and resolved.model.context.declared is None
        resolved.model.notify("never heard")
        assert heard == ["model_reply_cut"]
        assert resolved.declined() is None
    finally:
        await resolved.aclose()
