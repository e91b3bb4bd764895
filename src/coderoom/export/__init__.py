"""A recorded run as a notebook, as a model-free script, and re-run on new inputs."""

REPLAY_TIMEOUT = 1800.0  # seconds for a whole replay, unless the caller says otherwise
