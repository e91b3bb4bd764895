"""coderoom's version, in a module of its own: the package re-exports it, and `run` records it
without importing the package's lazy names (which would close an import circle through them)."""

__version__ = "0.1.0"
