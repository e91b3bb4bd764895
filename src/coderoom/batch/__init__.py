"""`coderoom batch`: many jobs on this machine, each in its own sandbox and run folder.

`manifest` turns job folders or a manifest's rows into validated jobs, `runner` runs them
(one job: `run_one`, a small serialisable `JobOutcome` back) and `ledger` keeps batch.jsonl.
"""
