"""Programs that run inside the local sandbox. Standard library only (a test checks it)."""
