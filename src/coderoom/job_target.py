"""What `coderoom run TARGET` means when TARGET is no job folder: a prompt, or a typo.

`coderoom run examples/building_energ` was taken as the prompt: the offline analyst answered,
the run failed and left a run folder. A target that looks like a path (a `/`, a `.toml` name, or
one word close to a folder that is here) and is none is a usage error that suggests the nearest
folder; a request in words (it has spaces) is a prompt, as before.
"""

from __future__ import annotations

import difflib
import itertools
from pathlib import Path

from .errors import JobError

MAX_SIBLINGS = 2000  # folder entries compared with a mistyped name
SUGGEST_CUTOFF = 0.6  # difflib ratio for "did you mean"
SINGLE_WORD_CUTOFF = 0.8  # a one-word prompt is taken for a folder name only when this close


def check_job_target(target: str) -> None:
    """Raise a JobError (exit 2, before any run folder) when `target` looks like a job folder
    that does not exist; return when it is a folder, a job file, or reads as a prompt."""
    path = Path(target).expanduser()
    if path.is_dir() or (path.suffix == ".toml" and path.is_file()) or any(c.isspace() for c in target):
        return
    nearest = _nearest(path, SUGGEST_CUTOFF)
    looks_like_path = "/" in target or path.suffix == ".toml"
    if not looks_like_path and _nearest(path, SINGLE_WORD_CUTOFF) is None:
        return
    hint = f"did you mean {nearest!r}?" if nearest else "give a job folder (with coderoom.toml) or a prompt in quotes"
    raise JobError(f"no job folder {target!r}; {hint}")


def _nearest(path: Path, cutoff: float) -> str | None:
    """The folder beside `path` whose name is closest to its name, written as the user wrote
    the parent."""
    parent = path.parent
    try:
        entries = [e.name for e in itertools.islice(parent.iterdir(), MAX_SIBLINGS) if e.is_dir()]
    except OSError:
        return None
    match = difflib.get_close_matches(path.name, entries, n=1, cutoff=cutoff)
    if not match:
        return None
    return match[0] if str(parent) == "." else str(parent / match[0])
