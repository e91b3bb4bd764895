"""What a declared Python package may be: the one rule for `[sandbox.environment]`, `--package`
and `[sandbox.docker] packages`.

A requirement is a PEP 508 name with optional extras and version specifiers, nothing else: no
URLs, no paths (nor a name pip takes for an archive file, such as `helper.zip`), no environment
markers and no pip options (a line such as `--index-url` in a requirements file would change
where every package comes from; the index is its own setting).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

_REQUIREMENT = re.compile(
    r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
    r"(?:\[[A-Za-z0-9._-]+(?:,[A-Za-z0-9._-]+)*\])?"
    r"(?:(?:===|==|!=|~=|<=|>=|<|>)[A-Za-z0-9.*+!_-]+(?:,(?:===|==|!=|~=|<=|>=|<|>)[A-Za-z0-9.*+!_-]+)*)?$"
)
_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
# pip takes a requirement whose name ends so for an archive file in its working directory (pip's
# ARCHIVE_EXTENSIONS): `helper.zip` or `x-1.0-py3-none-any.whl` would install that file, an
# sdist's setup.py running on the host, whatever the index or find-links say
_ARCHIVE = re.compile(r"\.(?:whl|zip|tar|tgz|tbz|txz|tlz|tar\.(?:gz|bz2|xz|lz|lzma))$", re.IGNORECASE)
MAX_PACKAGES = 200
MAX_REQUIREMENTS_BYTES = 64 * 1024
PACKAGE_FLAG = "--package"
PACKAGE_HELP = "a Python package the sandbox needs, e.g. 'statsmodels==0.14.*' (repeatable; built once, cached)"
HOW = "use a name with optional extras and version specifiers, e.g. 'statsmodels==0.14.*'"


def normalize(packages: Iterable[str]) -> list[str]:
    """Sorted, de-duplicated requirement strings; ValueError naming every one that is not plain."""
    cleaned = sorted({_tight(p) for p in packages if isinstance(p, str) and p.strip()})
    bad = [p for p in cleaned if not _plain(p)]
    if bad:
        raise ValueError(f"not a plain pip requirement: {', '.join(repr(p[:80]) for p in bad[:5])} ({HOW})")
    if len(cleaned) > MAX_PACKAGES:
        raise ValueError(f"{len(cleaned)} packages declared; at most {MAX_PACKAGES}")
    return cleaned


def _plain(requirement: str) -> bool:
    name = _NAME.match(requirement)
    return bool(_REQUIREMENT.match(requirement)) and not (name and _ARCHIVE.search(name.group(0)))


def _tight(requirement: str) -> str:
    """`pandas >= 2.0` as `pandas>=2.0`: spaces beside operators, commas and brackets go (a
    space anywhere else stays, and the requirement is refused)."""
    return re.sub(r"\s*([<>=!~,\[\]])\s*", r"\1", requirement.strip())


def project_name(requirement: str) -> str:
    """The normalized project name of a plain requirement (PEP 503): `Foo_Bar[x]>=1` -> foo-bar."""
    match = _NAME.match(requirement)
    return re.sub(r"[-_.]+", "-", match.group(0)).lower() if match else requirement


def read_file(path: Path) -> list[str]:
    """The requirements of a requirements file: one per line, `#` comments and blank lines
    skipped; ValueError (naming the file and line) for anything else, such as a pip option."""
    try:
        if path.stat().st_size > MAX_REQUIREMENTS_BYTES:
            raise ValueError(f"{path}: larger than {MAX_REQUIREMENTS_BYTES // 1024} KiB")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot be read ({exc.__class__.__name__})") from None
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        item = line.split("#", 1)[0].strip()
        if not item:
            continue
        if not _plain(_tight(item)):
            raise ValueError(f"{path}:{number}: {item[:80]!r} is not a plain pip requirement ({HOW})")
        found.append(item)
    return found
