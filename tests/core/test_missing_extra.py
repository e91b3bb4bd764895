"""A missing optional extra is one line and exit 2, from every command that starts a sandbox.

After `pip install .` (no extras), `coderoom sandbox run --sandbox docker -- id` printed a
40-line ModuleNotFoundError. The `docker` package is installed here, so each test hides it from
a subprocess with a sitecustomize that makes `import docker` fail as it does when absent.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "coderoom"
HIDE_DOCKER = '''
import sys

class _Absent:
    def find_spec(self, name, path=None, target=None):
        if name == "docker" or name.startswith("docker."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _Absent())
'''
ONE_LINE = "coderoom: error: the docker backend needs the `docker` Python package: pip install 'coderoom[docker]'"


@pytest.mark.parametrize(
    "args",
    [
        ["sandbox", "run", "--sandbox", "docker", "--", "id"],
        ["sandbox", "run", "--sandbox", "docker", "--workspace", "{tmp}", "--", "id"],  # the typer path
        ["run", "--sandbox", "docker", "--out", "{tmp}/run", "Count the rows of input/x.csv"],
    ],
    ids=["sandbox-run-fast-path", "sandbox-run-typer", "run"],
)
def test_a_missing_docker_package_is_one_line_and_exit_2(tmp_path: Path, args: list[str]) -> None:
    hidden = tmp_path / "hide"
    hidden.mkdir()
    (hidden / "sitecustomize.py").write_text(HIDE_DOCKER)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "CODEROOM_MODEL"))}
    env["PYTHONPATH"] = str(hidden)
    argv = [arg.format(tmp=tmp_path) for arg in args]
    result = subprocess.run(
        [sys.executable, "-m", "coderoom", *argv], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == ONE_LINE
    assert not (tmp_path / "run").exists()


def test_every_command_prepares_a_backend_through_the_registry() -> None:
    """`registry.prepare_backend` refuses an unusable backend first; no surface calls a backend's
    `prepare` directly (and so none can skip that check)."""
    callers = [
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if re.search(r"\)\.prepare\(|backend\.prepare\(", path.read_text()) and path.name != "registry.py"
    ]
    assert callers == []
