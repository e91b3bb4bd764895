"""Workspace file reads and writes that never follow a symlink; run in the container as an
ordinary command (`python3 -I -S -c SOURCE MODE PATH`, the workspace as working directory).

`read PATH`: the file's bytes on stdout (the host caps them). `write PATH` / `append PATH`: stdin
into the file, parents created. `create PATH`: the same into a new file (O_EXCL: exit 4 when the
name exists as anything, a dangling symlink included). Every component is opened with O_NOFOLLOW beneath the working
directory, so a link the sandbox planted is refused instead of followed. Exit 2: no such file;
3: a symlink or a non-directory on the way, or not a regular file; the reason on stderr.
"""

import errno
import os
import stat
import sys

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def fail(code, message):
    sys.stderr.write("%s\n" % message)
    raise SystemExit(code)


def parent_fd(parts, create):
    fd = os.open(".", _DIR)
    for part in parts:
        if create:
            try:
                os.mkdir(part, 0o755, dir_fd=fd)
            except FileExistsError:
                pass
        try:
            child = os.open(part, _DIR, dir_fd=fd)
        finally:
            os.close(fd)
        fd = child
    return fd


def main(mode, path):
    parts = path.split("/")
    try:
        dir_fd = parent_fd(parts[:-1], create=mode != "read")
        if mode == "read":
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                fail(3, "%s: not a regular file" % path)
            source, sink = fd, 1
        else:
            how = {"append": os.O_APPEND, "create": os.O_EXCL}.get(mode, os.O_TRUNC)
            fd = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | how, 0o644, dir_fd=dir_fd)
            source, sink = 0, fd
    except OSError as e:
        if e.errno == errno.EEXIST:
            fail(4, "%s: exists" % path)
        code = 2 if e.errno == errno.ENOENT else 3
        on_the_way = e.errno in (errno.ELOOP, errno.ENOTDIR)
        fail(code, "%s: %s" % (path, "a symlink or a non-directory on the way" if on_the_way else e.strerror))
    while True:
        chunk = os.read(source, 1 << 20)
        if not chunk:
            break
        view = memoryview(chunk)
        while view:
            view = view[os.write(sink, view):]


main(sys.argv[1], sys.argv[2])
