"""The record's file name, apart from the events: `coderoom --help` needs it without pydantic,
and the events re-export it without importing the package that lazily re-exports them."""

RECORD_FILE = "run.jsonl"
