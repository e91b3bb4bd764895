"""Programs that run INSIDE a sandbox (standard library only): never imported on the host."""
