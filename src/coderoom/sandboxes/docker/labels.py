"""Names coderoom gives Docker objects: the sandbox image, and the labels on every container so
`prune` finds what a crashed session left behind. No imports: `--help` reads DEFAULT_IMAGE."""

DEFAULT_IMAGE = "coderoom-sandbox:latest"  # built from inside/Dockerfile

LABEL = "coderoom.sandbox"
SESSION_LABEL = "coderoom.session"
CREATED_LABEL = "coderoom.created"
HOST_PID_LABEL = "coderoom.host-pid"
