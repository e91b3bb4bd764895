"""A required output larger than `artifacts.MAX_OUTPUT_READ` is named with its size where it was
made, before any of it is read: neither the checker inside the sandbox nor a copy to the host
takes it. The bound is lowered here so the file stays small; the comparison is the same."""

from __future__ import annotations

import pytest

from coderoom import artifacts
from coderoom.jobs import OutputSpec
from coderoom.outputs import OutputCheck
from coderoom.sandboxes import SandboxSpec
from coderoom.sandboxes.session import open_session

BOUND = 1024**2


async def test_an_output_over_the_read_bound_is_refused_by_its_size_before_it_is_read(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(artifacts, "MAX_OUTPUT_READ", BOUND)
    reads: list[str] = []
    monkeypatch.setattr(artifacts, "_check_copies", lambda session, outputs: reads.extend(o.path for o in outputs))
    async with open_session(SandboxSpec(backend=backend)) as session:
        made = await session.exec(f"mkdir -p output && head -c {BOUND + 1} /dev/zero > output/big.csv && "
                                  f"head -c {BOUND} /dev/zero | tr '\\0' 'a' > output/at_bound.txt")
        assert made.exit_code == 0, made.stderr
        big, at_bound = await artifacts.check_in_session(session, [OutputSpec(path="output/big.csv"),
                                                                   OutputSpec(path="output/at_bound.txt")])
    assert big == OutputCheck(
        "output/big.csv", False, f"{BOUND + 1:,} bytes, over the {BOUND:,}-byte limit for an output", size=BOUND + 1
    )
    assert at_bound.ok, at_bound  # the bound itself is allowed, and that file went to the checker
    assert reads == []  # the checker ran inside the sandbox: nothing was copied out
