"""Programs that run inside the sandbox for a tool. Standard library only (a test checks it)."""
