"""`coderoom batch`: many jobs on this machine, each in its own sandbox and run folder.

`manifest` turns job folders or a manifest's rows into validated jobs, `runner` runs them
(one job: `run_one`, a small serialisable `JobOutcome` back) and `ledger` keeps batch.jsonl.
With `--ray`, `cluster` sends each job to a Ray cluster, `on_node` runs it there and `transfer`
carries its inputs out and its run folder back.
"""
