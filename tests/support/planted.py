"""Every planted form an exit must keep in, three ways: a shell script a real sandbox runs, the
same tree written on the host as a forged (pre-policy) run folder, and a hand-built tar.

The config files name a pager that would only `touch` a marker: nothing here is ever run on the
host (the tests check structure, never call git on what a sandbox wrote).
"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16
CONFIG = "[core]\n\tpager = touch PAGER-RAN\n\tfsmonitor = touch FSMONITOR-RAN\n"
HEAD = "ref: refs/heads/main\n"

FILES: dict[str, str] = {
    ".git/config": CONFIG,  # a .git folder
    "pointer/.git": "gitdir: ../lib1\n",  # a .git FILE pointing at a repository under another name...
    "lib1/HEAD": HEAD,  # ...which git then reads
    "lib1/config": CONFIG,
    "bare/HEAD": HEAD,  # an implicit bare repository: HEAD beside objects/ and refs/
    "bare/config": CONFIG,
    "src/HEAD": HEAD,  # a repository split across folders: src/commondir -> lib/{objects,refs,config}
    "src/commondir": "../lib\n",
    "lib/config": CONFIG,
    "wt/HEAD": HEAD,  # a worktree's admin folder: HEAD beside gitdir
    "wt/gitdir": "/elsewhere/.git\n",
    "wt/config.worktree": CONFIG,
    ".hg/hgrc": "[hooks]\nupdate = touch HG-RAN\n",
    ".envrc": "touch DIRENV-RAN\n",
    ".vscode/tasks.json": '{"version": "2.0.0", "tasks": [{"label": "x", "command": "touch VSCODE-RAN", "runOptions": {"runOn": "folderOpen"}}]}\n',
    "coderoom-left-out.txt": "nothing was left out\n",  # a forged list
}
DIRS = ("lib1/objects", "lib1/refs/heads", "bare/objects", "bare/refs", "lib/objects", "lib/refs", "src/app")
LINKS = {"escape": "/etc/passwd", "climb": "../../../../etc/passwd"}
FIFO = "pipe"
IMAGES = {".git/shot.png": PNG, "lib/objects/fig.png": PNG}
"""PNGs inside planted metadata: `export` must not embed them either."""
KEPT = {"kept.csv": "a,b\n1,2\n", "src/app/main.py": "print('app')\n", "plot.png": PNG}
"""Ordinary files, some beside the planted ones: they leave."""

REFUSED = sorted([*FILES, *LINKS, FIFO, *IMAGES])
"""Every planted name: none may reach the host."""
GIT_CONFIGS = sorted(name for name in FILES if name.endswith(("config", "config.worktree", ".git")))


def plant_script(base: str) -> str:
    """A shell script that writes every form under `base` (run inside the sandbox)."""
    lines = [f"mkdir -p {base} && cd {base}"]
    lines += [f"mkdir -p {d}" for d in (*DIRS, ".git", ".hg", ".vscode", "pointer", "wt")]
    for name, text in {**FILES, **{k: v for k, v in KEPT.items() if not k.endswith(".png")}}.items():
        lines.append(f"printf '%s' {_quoted(text)} > {name}")
    for name in (*IMAGES, *[k for k in KEPT if k.endswith(".png")]):
        lines.append(f"printf '\\211PNG\\r\\n\\032\\n' > {name}")
    lines += [f"ln -s {target} {name}" for name, target in LINKS.items()]
    lines.append(f"mkfifo {FIFO}")
    return " && ".join(lines)


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def plant_on_disk(root: Path) -> None:
    """The same tree on the host, as a run folder from before the exit policy would hold it."""
    for name in DIRS:
        (root / name).mkdir(parents=True, exist_ok=True)
    for name, text in {**FILES, **KEPT}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    for name, data in IMAGES.items():
        (root / name).write_bytes(data)
    for name, target in LINKS.items():
        os.symlink(target, root / name)
    os.mkfifo(root / FIFO)


def planted_tar(base: str = "") -> io.BytesIO:
    """The same tree as a workspace tar built by hand, with a character device as well."""
    out = io.BytesIO()
    prefix = f"{base}/" if base else ""
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in DIRS:
            tar.addfile(_info(prefix + name, tarfile.DIRTYPE))
        for name, text in {**FILES, **IMAGES, **KEPT}.items():
            data = text if isinstance(text, bytes) else text.encode()
            info = _info(prefix + name, tarfile.REGTYPE)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in LINKS.items():
            info = _info(prefix + name, tarfile.SYMTYPE)
            info.linkname = target
            tar.addfile(info)
        tar.addfile(_info(prefix + FIFO, tarfile.FIFOTYPE))
        device = _info(prefix + "null", tarfile.CHRTYPE)
        device.devmajor, device.devminor = 1, 3
        tar.addfile(device)
    out.seek(0)
    return out


def _info(name: str, kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode = kind, 0o755 if kind == tarfile.DIRTYPE else 0o644
    return info


def leaked(root: Path, base: str = "") -> list[str]:
    """The planted names that exist under `root` (links and FIFOs included, never followed)."""
    prefix = f"{base}/" if base else ""
    return [name for name in REFUSED if os.path.lexists(root / (prefix + name))]
