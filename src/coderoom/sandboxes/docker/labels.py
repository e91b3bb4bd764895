"""Labels on every coderoom container, so `prune` finds what a crashed session left behind."""

LABEL = "coderoom.sandbox"
SESSION_LABEL = "coderoom.session"
CREATED_LABEL = "coderoom.created"
HOST_PID_LABEL = "coderoom.host-pid"
