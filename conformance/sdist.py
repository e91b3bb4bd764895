"""The Agents SDK's own tests, fetched at test time: the sdist of the installed `openai-agents`
version from the package index (pip's own client and configuration), unpacked into a temporary
folder. The SDK's tests are not copied into this repository, so they always match the SDK that
coderoom runs on.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
from importlib.metadata import version
from pathlib import Path

DISTRIBUTION = "openai-agents"
DOWNLOAD_TIMEOUT_S = 300  # pip's own retries included; the sdist is about 7 MB


class SdistUnavailable(Exception):
    """The sdist could not be fetched or has no tests/sandbox (a configuration problem: exit 2)."""


def installed_version() -> str:
    return version(DISTRIBUTION)


def fetch(into: Path, sdk_version: str | None = None) -> Path:
    """Download and unpack the sdist of `sdk_version` (default: the installed one) under `into`;
    returns the unpacked source folder (the one holding `tests/sandbox`)."""
    sdk_version = sdk_version or installed_version()
    download = into / "download"
    command = [
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
        f"{DISTRIBUTION}=={sdk_version}", "--dest", str(download),
    ]  # fmt: skip
    try:
        subprocess.run(command, check=True, timeout=DOWNLOAD_TIMEOUT_S, capture_output=True, text=True)
    except subprocess.CalledProcessError as exc:
        raise SdistUnavailable(f"pip download of {DISTRIBUTION}=={sdk_version} failed: {exc.stderr.strip()}") from exc
    except subprocess.TimeoutExpired as exc:
        raise SdistUnavailable(f"pip download of {DISTRIBUTION}=={sdk_version} took over {DOWNLOAD_TIMEOUT_S} s") from exc
    archives = sorted(download.glob("*.tar.gz"))
    if len(archives) != 1:
        raise SdistUnavailable(f"expected one sdist in {download}, found {[a.name for a in archives]}")
    with tarfile.open(archives[0]) as archive:
        archive.extractall(into / "src", filter="data")  # no links out, no devices, no absolute names
    roots = [p.parent.parent for p in (into / "src").glob("*/tests/sandbox")]
    if len(roots) != 1:
        raise SdistUnavailable(f"{archives[0].name} has no single tests/sandbox folder")
    return roots[0]
