"""Snapshots (`persist_workspace` / `hydrate_workspace`) round-trip the workspace exactly and
refuse, with the SDK's WorkspaceArchiveWriteError and the reason, what may not be restored; on
every backend. The snapshot is hostile data: see hostile/snapshot.py and docs/security.md."""

from __future__ import annotations

import gzip
import io
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
from agents.sandbox.errors import WorkspaceArchiveWriteError

from coderoom.sandboxes import Limits, SandboxSpec
from coderoom.sandboxes.session import open_session

TREE = (
    "mkdir -p d/e ro && printf '#!/bin/sh\\necho ran\\n' > run.sh && chmod 755 run.sh && "
    "echo top > top.txt && chmod 640 top.txt && echo deep > d/e/deep.txt && "
    "ln top.txt hard.txt && ln -s ../top.txt d/up_link && ln -s /workspace/d/e/deep.txt abs_link && "
    "ln -s missing dangling && chmod 700 d && touch ro/kept && chmod 555 ro"
)
SURVEY = (
    "stat -c '%n %a %h' run.sh top.txt hard.txt d ro ro/kept && "
    "readlink d/up_link abs_link dangling && ./run.sh && cat abs_link d/up_link && "
    "[ top.txt -ef hard.txt ] && echo same-inode"
)
# a directory comes back owner-writable (u+rwx, as the archivers read it): ro is 555 before only
EXPECTED = (
    b"run.sh 755 1\ntop.txt 640 2\nhard.txt 640 2\nd 700 3\nro %s 2\nro/kept 644 1\n"
    b"../top.txt\n%s\nmissing\nran\ndeep\ntop\nsame-inode\n"
)


def _spec(backend: str, **limits: object) -> SandboxSpec:
    return SandboxSpec(backend=backend, limits=Limits(**limits))  # type: ignore[arg-type]


def _tar(*members: tuple[tarfile.TarInfo, bytes | None]) -> io.BytesIO:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    out.seek(0)
    return out


def _info(name: str, kind: bytes = tarfile.REGTYPE, *, mode: int = 0o644, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname = kind, mode, link
    return info


async def test_a_snapshot_round_trips_files_modes_hard_links_and_symlinks(backend: str) -> None:
    async with open_session(_spec(backend)) as first:
        made = await first.exec(TREE)
        assert made.exit_code == 0, made.stderr
        assert (await first.exec(SURVEY)).stdout == EXPECTED % (b"555", b"/workspace/d/e/deep.txt")
        snapshot = await first.persist_workspace()
    async with open_session(_spec(backend)) as second:
        await second.hydrate_workspace(snapshot)
        after = await second.exec(SURVEY)
    # the same tree; the absolute in-workspace link is relative, so it holds wherever restored
    assert after.stdout == EXPECTED % (b"755", b"d/e/deep.txt"), after.stderr


def _not_a_tar() -> io.BytesIO:
    return io.BytesIO(b"this is not a tar archive at all\n" * 40)


def _truncated() -> io.BytesIO:
    whole = _tar((_info("big.bin"), b"x" * 100_000)).getvalue()
    return io.BytesIO(whole[: len(whole) // 2])


def _compressed() -> io.BytesIO:
    return io.BytesIO(gzip.compress(_tar((_info("a.txt"), b"a")).getvalue()))


def _huge_claim() -> io.BytesIO:
    """A header claiming a 1 TB (sparse-looking) file with no data behind it."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        info = _info("sparse.bin")
        info.size = 10**12
        tar.addfile(info)
    out.seek(0)
    return out


def _huge_header() -> io.BytesIO:
    """A PAX header of 2 MiB (a name that long), which tarfile would read whole."""
    return _tar((_info("n" * 2 * 2**20), b"x"))


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (_not_a_tar, "not an uncompressed tar"),
        (_truncated, "truncated"),
        (_compressed, "not an uncompressed tar"),
        (_huge_claim, "claims 1000000000000 bytes past the end"),
        (_huge_header, "metadata header (MAX_HEADER_DATA"),
    ],
    ids=["not-a-tar", "truncated", "gzip", "huge-claim", "huge-header"],
)
async def test_an_invalid_snapshot_raises_the_sdks_write_error_and_leaves_the_workspace(
    backend: str, make: Callable[[], io.BytesIO], reason: str
) -> None:
    async with open_session(_spec(backend)) as session:
        await session.exec("echo live > live.txt")
        with pytest.raises(WorkspaceArchiveWriteError) as caught:
            await session.hydrate_workspace(make())
        assert caught.value.context["member"] == "<tar>"
        assert reason in str(caught.value.context["reason"])
        assert (await session.exec("cat live.txt")).stdout == b"live\n"


UNSAFE: list[tuple[str, list[tuple[tarfile.TarInfo, bytes | None]], str]] = [
    ("absolute symlink", [(_info("l", tarfile.SYMTYPE, link="/etc/passwd"), None)], "absolute symlink target"),
    ("escaping symlink", [(_info("d/l", tarfile.SYMTYPE, link="../../x"), None)], "escapes archive root"),
    ("parent traversal", [(_info("../evil"), b"x")], "parent traversal"),
    ("absolute name", [(_info("/tmp/evil"), b"x")], "absolute path"),
    ("character device", [(_info("null", tarfile.CHRTYPE), None)], "character device"),
    ("fifo", [(_info("pipe", tarfile.FIFOTYPE), None)], "FIFO"),
    ("setuid file", [(_info("suid", mode=0o4755), b"#!/bin/sh\n")], "setuid/setgid"),
    ("hard link outside", [(_info("h", tarfile.LNKTYPE, link="../../etc/passwd"), None)], "hard link target"),
    ("hard link to nothing", [(_info("h", tarfile.LNKTYPE, link="absent"), None)], "not an earlier regular file"),
    ("beneath a symlink", [(_info("l", tarfile.SYMTYPE, link="d"), None), (_info("l/f"), b"x")], "descends through symlink"),
    ("over workspace_size", [(_info("big"), b"x" * 1_100_000)], "workspace_size limit"),
]


async def test_unsafe_members_are_refused_with_the_reason_and_nothing_is_written(backend: str) -> None:
    async with open_session(_spec(backend, workspace_size="1M")) as session:
        for label, members, reason in UNSAFE:
            snapshot = _tar((_info("first.txt"), b"written first?"), *members)
            with pytest.raises(WorkspaceArchiveWriteError) as caught:
                await session.hydrate_workspace(snapshot)
            assert reason in str(caught.value.context["reason"]), label
            assert (await session.exec("ls -A")).stdout == b"", label  # checked whole, then written


class _ManyMembers(io.RawIOBase):
    """A seekable tar of `count` empty-file headers (all alike), made as it is read: 10**6
    members are 512 MB of tar that never exist at once, here or on disk."""

    def __init__(self, count: int) -> None:
        self._header = _info("f").tobuf(tarfile.USTAR_FORMAT)
        self._size = (count + 2) * tarfile.BLOCKSIZE
        self._count, self._pos = count, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        self._pos = {0: offset, 1: self._pos + offset, 2: self._size + offset}[whence]
        return self._pos

    def tell(self) -> int:
        return self._pos

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        start, end = self._pos, min(self._pos + len(buffer), self._size)
        headers_end = max(start, min(end, self._count * tarfile.BLOCKSIZE))
        skew = start % tarfile.BLOCKSIZE
        data = (self._header * ((skew + headers_end - start) // tarfile.BLOCKSIZE + 1))[skew : skew + headers_end - start]
        data += bytes(max(0, end - headers_end))
        buffer[: len(data)] = data
        self._pos += len(data)
        return len(data)


async def test_a_snapshot_of_a_million_members_is_refused_at_the_member_limit(backend: str) -> None:
    async with open_session(_spec(backend)) as session:
        with pytest.raises(WorkspaceArchiveWriteError) as caught:
            await session.hydrate_workspace(_ManyMembers(10**6))  # type: ignore[arg-type]
        assert "more than 100000 members (MAX_SNAPSHOT_MEMBERS)" in str(caught.value.context["reason"])
        assert (await session.exec("ls -A | wc -l")).stdout == b"0\n"


async def test_a_symlink_planted_in_the_workspace_is_never_followed_on_the_host(backend: str, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o777)
    outside.chmod(0o777)
    async with open_session(_spec(backend)) as session:
        await session.exec(f"ln -s {outside} d")  # the host's path: a host-side write would land there
        with pytest.raises(WorkspaceArchiveWriteError) as refused:
            await session.hydrate_workspace(_tar((_info("d/planted.txt"), b"x")))
    # local refuses on the host, by reason; docker's tar -x follows the link inside the
    # container, where that path does not exist
    expected = "a symlink or a file on its way" if backend == "local" else "Cannot open"
    assert expected in str(refused.value.context["reason"])
    assert list(outside.iterdir()) == []
