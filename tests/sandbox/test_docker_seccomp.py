"""The docker sandbox's seccomp profile as data: derived from upstream's default profile by the
local filter's lists (seccomp.py). What it does to real syscalls is the attack catalogue's job
(KERN-07, KERN-10, KERN-11, PROC-08 on the docker backend); these tests need no engine."""

from __future__ import annotations

import json
import random

from coderoom.sandboxes.docker_seccomp import (
    UPSTREAM,
    build_profile,
    patterns_avoiding,
    profile_json,
)
from coderoom.sandboxes.seccomp import (
    _DENY,
    ALLOWED_PERSONALITIES,
    ALLOWED_SOCKET_FAMILIES,
    CLONE_NEW_MASK,
    DENIED_IOCTLS,
)

UPSTREAM_PROFILE = json.loads(UPSTREAM.read_text())
PROFILE = json.loads(profile_json())


def _allowed_unconditionally(profile: dict) -> set[str]:
    return {
        name
        for rule in profile["syscalls"]
        if rule["action"] == "SCMP_ACT_ALLOW" and not rule.get("args") and not rule.get("includes")
        for name in rule["names"]
    }


def _matching(profile: dict, name: str) -> list[dict]:
    return [rule for rule in profile["syscalls"] if name in rule["names"]]


def test_upstream_allowed_what_coderoom_denies() -> None:
    """Otherwise the derivation below proves nothing."""
    assert {"ioctl", "name_to_handle_at", "adjtimex"} <= _allowed_unconditionally(UPSTREAM_PROFILE)
    assert any(rule.get("includes", {}).get("caps") for rule in UPSTREAM_PROFILE["syscalls"])
    assert any(entry["subArchitectures"] for entry in UPSTREAM_PROFILE["archMap"])


def test_native_architecture_only() -> None:
    assert all(entry["subArchitectures"] is None for entry in PROFILE["archMap"])
    assert "architectures" not in PROFILE


def test_denied_calls_are_allowed_nowhere() -> None:
    allowed = {name for rule in PROFILE["syscalls"] if rule["action"] == "SCMP_ACT_ALLOW" for name in rule["names"]}
    assert not allowed & set(_DENY)
    assert PROFILE["defaultAction"] == "SCMP_ACT_ERRNO" and PROFILE["defaultErrnoRet"] == 1


def test_no_rule_depends_on_a_capability() -> None:
    assert not [rule for rule in PROFILE["syscalls"] if rule.get("includes", {}).get("caps")]


def test_socket_and_personality_allow_only_the_local_lists() -> None:
    for name, values in (("socket", ALLOWED_SOCKET_FAMILIES), ("personality", ALLOWED_PERSONALITIES)):
        conditions = [rule["args"] for rule in _matching(PROFILE, name)]
        assert all(rule["action"] == "SCMP_ACT_ALLOW" for rule in _matching(PROFILE, name))
        assert sorted(c[0]["valueTwo"] for c in conditions) == sorted(values)
        assert all(len(c) == 1 and c[0]["value"] == 0xFFFFFFFF and c[0]["index"] == 0 for c in conditions)


def test_clone_rules_match_the_local_filter() -> None:
    clone = [r for r in _matching(PROFILE, "clone") if "s390" not in r.get("includes", {}).get("arches", [])]
    assert [r["args"] for r in clone] == [[{"index": 0, "value": CLONE_NEW_MASK, "op": "SCMP_CMP_MASKED_EQ"}]]
    assert [(r["action"], r["errnoRet"]) for r in _matching(PROFILE, "clone3")] == [("SCMP_ACT_ERRNO", 38)]


def test_ioctl_patterns_cover_every_request_but_the_denied() -> None:
    rules = _matching(PROFILE, "ioctl")
    patterns = [(r["args"][0]["value"], r["args"][0]["valueTwo"]) for r in rules]
    assert all(r["args"][0]["index"] == 1 for r in rules)
    rng = random.Random(7)
    samples = [rng.getrandbits(32) for _ in range(20_000)] + list(range(0x5400, 0x5500)) + [0, 0xFFFFFFFF]
    for request in samples:
        assert any(request & mask == value for mask, value in patterns) == (request not in DENIED_IOCTLS)


def test_patterns_avoiding_edge_cases() -> None:
    assert patterns_avoiding(set()) == [(0, 0)]  # nothing denied: one pattern matching everything
    for denied in ({0}, {0xFFFFFFFF}, {0, 0xFFFFFFFF}):
        patterns = patterns_avoiding(denied)
        for x in (0, 1, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF):
            assert any(x & mask == value for mask, value in patterns) == (x not in denied), (denied, hex(x))


def test_upstream_is_not_changed() -> None:
    before = json.dumps(UPSTREAM_PROFILE)
    build_profile(UPSTREAM_PROFILE)
    assert json.dumps(UPSTREAM_PROFILE) == before
