"""A recorded run as a notebook, as a model-free script, and re-run on new inputs."""
