"""typer's rich help renderer, loaded without the two modules it imports and never uses here.

`typer.rich_utils` (every `--help` and usage error goes through it) imports `rich.markdown`
and `rich.traceback` at its top: markdown_it, pygments and rich.pretty, 110 of the 415 modules
`coderoom --help` imported, about a fifth of its CPU time here. It uses Markdown only under `rich_markup_mode="markdown"` (ours is
typer's default, "rich": no help text here is Markdown) and Traceback only for pretty exceptions
(off: `application.app`). So it is imported with stand-ins for those two names; a stand-in that
is used after all (a later typer's new use) imports the real class then and acts as it, and the
rendered help is the same text (tests/core/test_help_text.py compares every command's).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

DEFERRED = {"rich.markdown": "Markdown", "rich.traceback": "Traceback"}


class _Deferred(type):
    """The metaclass of a stand-in: calling the class or reading an attribute of it (a
    classmethod such as Traceback.from_exception) imports the real class and uses it;
    isinstance and issubclass answer as the real class once its module is loaded (F-C5)."""

    _module: str

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return cls._real()(*args, **kwargs)

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(cls._real(), name)

    def __instancecheck__(cls, obj: Any) -> bool:
        # an instance exists only once the real module was imported: asking never imports it
        module = sys.modules.get(cls._module)
        return module is not None and isinstance(obj, getattr(module, cls.__name__))

    def __subclasscheck__(cls, sub: type) -> bool:
        module = sys.modules.get(cls._module)
        return module is not None and issubclass(sub, getattr(module, cls.__name__))

    def _real(cls) -> Any:
        return getattr(importlib.import_module(cls._module), cls.__name__)


def load_rich_utils() -> None:
    """Import `typer.rich_utils` with the stand-ins (nothing to do once it is imported, and no
    stand-in for a module something imported already). The stand-in modules are in
    `sys.modules` only during this import: a later `import rich.markdown` gets the real one."""
    if "typer.rich_utils" in sys.modules:
        return
    standing_in = [name for name in DEFERRED if name not in sys.modules]
    for name in standing_in:
        module = types.ModuleType(name)
        setattr(module, DEFERRED[name], _Deferred(DEFERRED[name], (), {"_module": name}))
        sys.modules[name] = module
    try:
        importlib.import_module("typer.rich_utils")
    finally:
        for name in standing_in:
            del sys.modules[name]
