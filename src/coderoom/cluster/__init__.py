"""What every `--ray` command shares: joining a cluster (`connect`) and the run folder's way back
from a node (`transfer`)."""
