"""The workspace archiver: runs inside the container as init.py's helper (a forked child of PID 1,
after every other process is dead), writes a tar of the workspace to stdout.

Sent by the host as source and run with ARGS = {"root", "skip", "max_bytes", "max_entries",
"hard_links"}; the
standard library only (any image with Python 3). What it writes is what the host reads, so it
is bounded here before a byte is read: the apparent sizes (`st_size`) of the regular files are
summed and the archive is refused (exit 3, the limit named on stderr) once they pass
`max_bytes`. A sparse file counts at its full size, so a `truncate -s 50G` is refused at once
instead of being read as 50 GB of zeros. Only directories, regular files and symlinks are
archived, with relative names, plain modes and no owners (with "hard_links", for a snapshot, a file's
second name is a hard link to its first, counted once); FIFOs, sockets and devices are left
out without being opened. The sandbox user owns every entry but can lock itself out (`chmod
000`, catalogue ART-11): the archiver gives itself read access first, as the local backend's
host-side archiver reads everything. Nothing can change the tree meanwhile (no process runs).
"""

import os
import stat
import sys
import tarfile

EXIT_LIMIT = 3
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def refuse(message):
    sys.stderr.write("workspace archive refused: %s\n" % message)
    sys.stderr.flush()
    raise SystemExit(EXIT_LIMIT)


def unlocked(dir_fd, name, st, need):
    """lstat result of `name` after giving the owner the `need` permission bits if missing."""
    if st.st_mode & need != need:
        os.chmod(name, stat.S_IMODE(st.st_mode) | need, dir_fd=dir_fd)  # not a link: lstat'ed
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    return st


def entries(root, skip, max_entries):
    """(rel, dir_fd, name, lstat) for everything under root, parents first, links not followed.
    Directories are opened when their turn comes (a wide tree must not hold a descriptor per
    subdirectory); each was lstat'ed as a directory and nothing runs that could swap it."""
    count = 0
    pending = [""]
    while pending:
        rel = pending.pop()
        dir_fd = os.open(os.path.join(root, rel) if rel else root, _DIR)
        try:
            for name in sorted(os.listdir(dir_fd)):
                path = rel + name
                if path in skip:
                    continue
                count += 1
                if count > max_entries:
                    refuse("more than %d entries (the archive's entry limit)" % max_entries)
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    st = unlocked(dir_fd, name, st, stat.S_IRWXU)
                    pending.append(path + "/")
                elif stat.S_ISREG(st.st_mode):
                    st = unlocked(dir_fd, name, st, stat.S_IRUSR)
                yield path, dir_fd, name, st
        finally:
            os.close(dir_fd)


def main(args):
    max_bytes, total = int(args["max_bytes"]), 0
    skip = set(args["skip"])
    links = bool(args.get("hard_links"))
    first_names = {}  # (dev, inode) -> the first name of a file with more than one
    out = os.fdopen(1, "wb", buffering=1 << 20)
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for rel, dir_fd, name, st in entries(args["root"], skip, int(args["max_entries"])):
            info = tarfile.TarInfo(rel)
            info.mtime = int(st.st_mtime)
            info.mode = stat.S_IMODE(st.st_mode) & 0o777
            if stat.S_ISDIR(st.st_mode):
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif stat.S_ISLNK(st.st_mode):
                info.type, info.linkname = tarfile.SYMTYPE, os.readlink(name, dir_fd=dir_fd)
                tar.addfile(info)
            elif stat.S_ISREG(st.st_mode) and links and (st.st_dev, st.st_ino) in first_names:
                info.type, info.linkname = tarfile.LNKTYPE, first_names[st.st_dev, st.st_ino]
                tar.addfile(info)
            elif stat.S_ISREG(st.st_mode):
                if st.st_nlink > 1:
                    first_names[st.st_dev, st.st_ino] = rel
                total += st.st_size
                if total > max_bytes:
                    refuse(
                        "%r is %d bytes (%d allocated), which takes the workspace past the "
                        "workspace_size limit of %d bytes" % (rel, st.st_size, st.st_blocks * 512, max_bytes)
                    )
                fd = os.open(name, _FILE, dir_fd=dir_fd)
                with os.fdopen(fd, "rb") as source:
                    info.size = os.fstat(fd).st_size
                    tar.addfile(info, source)
    out.flush()


main(ARGS)  # noqa: F821 -- set by init.py's helper runner
