"""The terminal never obeys sandbox or model text: escape sequences, C1 controls and rich markup that a
model writes and a sandbox command prints reach `coderoom run` and `coderoom show` as visible,
inert text, and cannot crash them."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from openai_server import OpenAIServer, call, say
from test_cli import COMMAND, clean_env

PAYLOADS = {
    "\x1b]52;c;Y2FuYXJ5\x07": "\\x1b]52;c;Y2FuYXJ5\\x07",  # OSC 52: write the clipboard
    "\x1b]0;pwned\x07": "\\x1b]0;pwned\\x07",  # OSC 0: set the window title
    "\x1b[2J": "\\x1b[2J",  # CSI: clear the screen
    "\x1b]8;;http://x\x07link\x1b]8;;\x07": "\\x1b]8;;http://x\\x07link\\x1b]8;;\\x07",  # OSC 8 link
    "\x9b31m": "\\x9b31m",  # C1 CSI
    "[/]": "[/]",  # closing tag with nothing open: rich raises MarkupError
    "[red]x[/red]": "[red]x[/red]",
    "[link=file:///etc/passwd]a[/link]": "[link=file:///etc/passwd]a[/link]",
}
HOSTILE = " ".join(PAYLOADS)
C1_UTF8 = re.compile(rb"\xc2[\x80-\x9f]")
SGR = re.compile(rb"\x1b\[[0-9;]*m")


def coderoom(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*COMMAND, *args], capture_output=True, env=env, timeout=120)


def assert_inert(output: bytes) -> str:
    assert b"\x1b" not in output and not C1_UTF8.search(output)
    return " ".join(output.decode("utf-8").split())


def test_hostile_text_reaches_run_and_show_escaped(tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    script = [
        call("exec_command", cmd=f"echo '[/] {HOSTILE}'; mkdir -p output; echo '{HOSTILE}' > output/x.md"),
        say(f"Final {HOSTILE} and [a markdown link](file:///etc/passwd)"),
    ]
    with OpenAIServer(script) as server:
        ran = coderoom(
            "run", "--output", "output/x.md", "--model", f"openai-compatible:scripted@{server.url}",
            "--out", str(tmp_path / "run"), f"prompt {HOSTILE}", env=env,
        )  # fmt: skip
    assert ran.returncode == 0, ran.stderr.decode(errors="replace")
    progress = assert_inert(ran.stderr)
    assert "exec_command echo '[/] \\x1b]52;c;Y2FuYXJ5\\x07" in progress  # the command's first line
    final = assert_inert(ran.stdout)
    assert "output/x.md" in final and "file:///etc/passwd" in final  # the link shows where it goes
    for escaped in PAYLOADS.values():
        assert escaped in final, escaped

    shown = coderoom("show", str(tmp_path / "run"), env=env)
    assert shown.returncode == 0, shown.stderr
    transcript = assert_inert(shown.stdout)
    for escaped in PAYLOADS.values():
        # in the prompt, the command, its output and the final message
        assert transcript.count(escaped) >= 4, (escaped, transcript)

    # On a colour terminal the only escape sequences are coderoom's own colours.
    coloured = coderoom("show", str(tmp_path / "run"), env={**env, "FORCE_COLOR": "1", "TERM": "xterm-256color"})
    assert SGR.search(coloured.stdout), "the probe must see a colour terminal, or its silence proves nothing"
    assert b"\x1b" not in SGR.sub(b"", coloured.stdout) and not C1_UTF8.search(coloured.stdout)
