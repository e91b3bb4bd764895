"""Check the files the analysis was asked to write: present, non-empty and readable for their type.

Sent into the sandbox by coderoom's offline analyst and run there:
    python .coderoom/verify.py output/a.csv output/b.png ...
Prints one line per file, then `CODEROOM_VERIFY {json}`. The analyst reports what this finds
rather than what it hoped to write.
"""

from __future__ import annotations

import csv
import json
import struct
import sys
from pathlib import Path

MARK = "CODEROOM_VERIFY"


def check(path: Path) -> tuple[bool, str]:
    if not path.is_file():
        return False, "missing"
    data = path.read_bytes()
    if not data:
        return False, "empty"
    suffix = path.suffix.lower()
    if suffix == ".csv":
        rows = list(csv.reader(data.decode("utf-8", errors="replace").splitlines()))
        return True, f"csv: {len(rows) - 1} rows, {len(rows[0]) if rows else 0} columns"
    if suffix == ".png":
        if data[:8] != b"\x89PNG\r\n\x1a\n":
            return False, "not a PNG"
        width, height = struct.unpack(">II", data[16:24])
        return True, f"png: {width}x{height}"
    if suffix in (".md", ".txt"):
        try:
            text = data.decode("ascii")
        except UnicodeDecodeError:
            return False, "not plain ASCII"
        return True, f"text: {len(text.splitlines())} lines, ASCII"
    if suffix == ".json":
        try:
            json.loads(data)
        except ValueError:
            return False, "invalid JSON"
        return True, "json: valid"
    return True, f"{len(data)} bytes"


if __name__ == "__main__":
    results = {}
    for name in sys.argv[1:]:
        ok, detail = check(Path(name))
        results[name] = {"ok": ok, "detail": detail, "bytes": Path(name).stat().st_size if ok else 0}
        print(f"{'ok ' if ok else 'BAD'} {name}: {detail}")
    print(MARK + " " + json.dumps(results, sort_keys=True))
