"""What runs inside a Docker sandbox: the init (PID 1) and the Dockerfiles of the image.
Standard library only (a test checks it)."""
