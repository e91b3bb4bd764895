"""Launcher speed changes attack pass (attacksp, 2026-12-07), the cached seccomp filter: S-P6.

`seccomp.build_filter` is built once per process for each set of arguments, and `Arch` hashes
without its syscall table. A session must still get the filter of its own architecture and its
own extra denials, whatever another session of the same process asked for first, and a cached
program must be the bytes a fresh build gives."""

from __future__ import annotations

import dataclasses
import itertools

from coderoom.sandboxes import seccomp
from coderoom.sandboxes.local import enforcement

DENIALS = [(), seccomp.NO_CGROUP_DENIED]
UNSUPPORTED = [(), ("fallocate",)]


def fresh(arch: seccomp.Arch, denied: tuple[str, ...], unsupported: tuple[str, ...]) -> bytes:
    return seccomp.build_filter.__wrapped__(arch, also_denied=denied, unsupported=unsupported)


def test_every_cached_filter_is_the_one_its_own_arguments_build() -> None:
    cases = list(itertools.product(seccomp.ARCHES.values(), DENIALS, UNSUPPORTED))
    for arch, denied, unsupported in cases + cases[::-1]:  # asked for in either order
        assert seccomp.build_filter(arch, also_denied=denied, unsupported=unsupported) == fresh(arch, denied, unsupported)
    programs = {seccomp.build_filter(a, also_denied=d, unsupported=u) for a, d, u in cases}
    assert len(programs) == len(cases)  # no two sessions' settings share a program


def test_an_arch_with_another_syscall_table_gets_its_own_filter() -> None:
    host = seccomp.ARCHES["x86_64"]
    renumbered = dataclasses.replace(host, table={**host.table, "ptrace": host.table["ptrace"] + 1})
    assert hash(renumbered) == hash(host)  # the cache's key hashes without the table ...
    assert seccomp.build_filter(host) != seccomp.build_filter(renumbered)  # ... but compares it
    assert seccomp.build_filter(renumbered) == fresh(renumbered, (), ())


def test_the_cached_program_cannot_be_changed_by_its_user() -> None:
    arch = seccomp.host_arch() or seccomp.ARCHES["x86_64"]
    program = enforcement.seccomp_filter(arch)
    assert isinstance(program, bytes)  # immutable: no session can edit the next one's filter
    assert enforcement.seccomp_filter(arch) is program
