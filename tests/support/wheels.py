"""Tiny wheels made in a test, offline: a throwaway package written as a wheel with the standard
library (`zipfile`), since no build backend may be fetched from an index in a test and the one
installed (setuptools without `wheel`) cannot build one here."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from collections.abc import Sequence
from pathlib import Path


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(folder: Path, name: str, version: str, source: str, *, requires: Sequence[str] = ()) -> Path:
    """`folder/NAME-VERSION-py3-none-any.whl` holding module `name` (`source`) and its metadata."""
    dist_info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    files = {
        f"{name}/__init__.py": source.encode(),
        f"{dist_info}/METADATA": metadata.encode(),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: coderoom-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{path},{_digest(data)},{len(data)}\n" for path, data in files.items()) + f"{dist_info}/RECORD,,\n"
    files[f"{dist_info}/RECORD"] = record.encode()
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return wheel


def make_sdist(folder: Path, name: str, version: str, canary: Path) -> Path:
    """`folder/NAME-VERSION.tar.gz`, a source distribution whose in-tree build backend writes
    `canary` the moment pip asks it anything: whoever builds it runs its code (no index needed)."""
    import io
    import tarfile

    hook = f"open({str(canary)!r}, 'w').write('built on this host')\n"
    backend = hook + "def get_requires_for_build_wheel(config_settings=None):\n    return []\n"
    files = {
        "PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        "pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n',
        "backend.py": backend,
        "setup.py": hook,
    }
    folder.mkdir(parents=True, exist_ok=True)
    sdist = folder / f"{name}-{version}.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        for path, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{name}-{version}/{path}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return sdist
