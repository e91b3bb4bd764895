"""coderoom: files and a request go in, an agent writes and runs code in a sandbox, artifacts come out."""

__version__ = "0.1.0"
