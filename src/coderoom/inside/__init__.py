"""Programs coderoom runs on hostile data, away from its own process. Standard library only (a
test checks it): they run inside a sandbox, whose Python has nothing else."""
