"""The record's file name, apart from the events: `coderoom --help` needs it without pydantic,
and the events re-export it without importing the package that lazily re-exports them; and what
a run folder's own name may be."""

import re

RECORD_FILE = "run.jsonl"
RUN_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,199}$")
"""A run folder's name as coderoom makes one (`run.new_run_dir`: a job's name, its time and a
random suffix) or a user names one (`--out`): what the page lists, what a client may name (the
MCP server's run resources) and what a session's Ray node may call the run folder made for it on
the driver (no separator, control or hidden name)."""
