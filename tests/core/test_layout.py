"""The package's layout is its architecture, and these tests hold it: no import cycles, no
upward imports, backends that stand alone, and programs that run inside a sandbox that need
nothing but the standard library.

Imports are read from the source (every `import`, also those inside functions), so a lazy
import that closes a loop or reaches upward fails here too; only `if TYPE_CHECKING:` blocks are
left out, since they never run.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "coderoom"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of `tree` except what sits under `if TYPE_CHECKING:`."""
    nodes, stack = [], [tree]
    while stack:
        node = stack.pop()
        nodes.append(node)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))
    return nodes


def imported_modules(name: str, *, type_only_too: bool = False) -> set[str]:
    """Every module of ours, and every top-level external module, that `name` imports (at run
    time; with `type_only_too`, also under `if TYPE_CHECKING:`)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    tree = ast.parse(path.read_text(), str(path))
    for node in (ast.walk(tree) if type_only_too else runtime_nodes(tree)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            submodules = {f"{target}.{alias.name}" for alias in node.names} & MODULES.keys()
            found |= submodules  # `from . import bwrap` imports the module bwrap...
            if len(submodules) < len(node.names):
                found.add(target)  # ...and `from . import name` the package that defines name
    return found


def internal_imports(name: str, *, type_only_too: bool = False) -> set[str]:
    return {m for m in imported_modules(name, type_only_too=type_only_too) if m in MODULES and m != name}


@pytest.mark.parametrize("type_only_too", [False, True], ids=["run time", "type-only imports too"])
def test_there_are_no_import_cycles(type_only_too: bool) -> None:
    """Not even through `if TYPE_CHECKING:` imports: a type-only circle is still two modules
    that cannot be understood (or type-checked) one without the other."""
    graph = {name: internal_imports(name, type_only_too=type_only_too) for name in MODULES}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for name in MODULES:
        if name not in state:
            visit(name, [name])
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


# who may not import whom: (importer prefix, forbidden prefixes)
FORBIDDEN = [
    ("coderoom.sandboxes", ["coderoom.cli", "coderoom.run", "coderoom.jobs", "coderoom.models",
                            "coderoom.tools", "coderoom.record", "coderoom.export", "coderoom.artifacts"]),
    ("coderoom.sandboxes.local", ["coderoom.sandboxes.registry", "coderoom.sandboxes.docker",
                                  "coderoom.sandboxes.unconfined", "coderoom.sandboxes.session"]),
    ("coderoom.sandboxes.docker", ["coderoom.sandboxes.registry", "coderoom.sandboxes.local",
                                   "coderoom.sandboxes.unconfined", "coderoom.sandboxes.session"]),
    ("coderoom.hostile", ["coderoom.sandboxes", "coderoom.run", "coderoom.cli", "coderoom.models",
                          "coderoom.record", "coderoom.jobs", "coderoom.web", "agents"]),
    # the web page reaches sandboxes and models only through coderoom.service's sessions
    ("coderoom.web", ["coderoom.sandboxes", "coderoom.run", "coderoom.cli", "coderoom.tools", "agents"]),
    ("coderoom.models", ["coderoom.sandboxes", "coderoom.run", "coderoom.cli", "coderoom.export"]),
    ("coderoom.record", ["coderoom.run", "coderoom.cli", "coderoom.export", "coderoom.sandboxes"]),
    ("coderoom.errors", ["coderoom."]),
    # live sessions name no backend and no front end; front ends reach sandboxes only through them
    ("coderoom.service", ["coderoom.cli", "coderoom.mcp_server", "coderoom.sandboxes.local",
                          "coderoom.sandboxes.docker"]),
    ("coderoom.mcp_server", ["coderoom.cli", "coderoom.sandboxes.local", "coderoom.sandboxes.docker",
                             "coderoom.tools", "agents"]),
    ("coderoom.run", ["coderoom.service", "coderoom.mcp_server"]),
    # what both HTTP front ends share names neither of them, nor sessions, runs or a backend
    ("coderoom.serving", ["coderoom.cli", "coderoom.web", "coderoom.mcp_server", "coderoom.service", "coderoom.run",
                          "coderoom.sandboxes.local", "coderoom.sandboxes.docker", "agents"]),
    # a batch is runs (run.run_job), never a front end's sessions; the CLI shows it
    ("coderoom.batch", ["coderoom.cli", "coderoom.service", "coderoom.mcp_server", "coderoom.web"]),
    # the one run lifecycle is below every surface that uses it
    ("coderoom.lifecycle", ["coderoom.run", "coderoom.service", "coderoom.mcp_server", "coderoom.cli"]),
]


@pytest.mark.parametrize("importer, forbidden", FORBIDDEN, ids=[f[0] for f in FORBIDDEN])
def test_no_upward_or_sideways_imports(importer: str, forbidden: list[str]) -> None:
    offences = [
        f"{name} imports {target}"
        for name in MODULES
        if name == importer or name.startswith(importer + ".")
        for target in imported_modules(name)
        if any(target == f.rstrip(".") or target.startswith(f if f.endswith(".") else f + ".") for f in forbidden)
    ]
    assert not offences, "\n".join(offences)


def test_only_the_entry_point_imports_the_cli() -> None:
    offences = [
        f"{name} imports {target}"
        for name in MODULES
        if not (name == "coderoom.__main__" or name.startswith("coderoom.cli"))
        for target in internal_imports(name)
        if target.startswith("coderoom.cli")
    ]
    assert not offences, "\n".join(offences)


INSIDE = sorted(p for p in PACKAGE.rglob("*.py") if "inside" in p.relative_to(PACKAGE).parts)


def test_there_are_programs_that_run_inside() -> None:
    names = {p.name for p in INSIDE}
    assert {"launcher_inner.py", "init.py", "kernel_server.py"} <= names


@pytest.mark.parametrize("path", INSIDE, ids=[str(p.relative_to(PACKAGE)) for p in INSIDE])
def test_programs_that_run_inside_a_sandbox_use_only_the_standard_library(path: Path) -> None:
    name = module_name(path)
    outside = sorted(
        target for target in imported_modules(name)
        if target.split(".")[0] not in sys.stdlib_module_names and not target.startswith("__future__")
    )
    assert not outside, f"{name} runs inside the sandbox but imports {outside}"
