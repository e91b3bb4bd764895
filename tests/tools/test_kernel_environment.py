"""The kernel's environment rule, one text (`kernel_server.ENV_RULE`) applied in two places: BOOT,
the kernel's first process, filters the environment with it before any of the kernel's source is
compiled, and `allowed` (what `started_clean` and `clean_environment` judge by) is the same text
compiled. Both run here for real on this machine's Python and are held to one table of names."""

from __future__ import annotations

import subprocess
import sys

from coderoom.tools.inside import kernel_server
from coderoom.tools.python_kernel import kernel_source

MARK = kernel_server.ENV_CLEAN_MARK
# a variable's name -> whether a kernel keeps it
TABLE = {
    "PATH": True, "HOME": True, "LANG": True, "TZ": True, "LD_LIBRARY_PATH": True, "MPLBACKEND": True,
    "HTTPS_PROXY": True, "https_proxy": True, "SSL_CERT_FILE": True,
    "LC_ALL": True, "LC_CTYPE": True, "LC_": True,
    "lc_all": False, "XLC_ALL": False, "LC": False, "path": False, "PATHS": False, " PATH": False,
    "OPENAI_API_KEY": False, "AWS_SECRET_ACCESS_KEY": False, "PYTHONPATH": False, "PYTHONSTARTUP": False,
    "LD_PRELOAD": False, "PWD": False, "CODEROOM_TOKEN": False,
}  # fmt: skip
# run by BOOT as the kernel's source would be: the names and the mark it was exec'd with
BOOTED = (
    "import os, sys\n"
    "names = sorted(e.split(b'=', 1)[0].decode() for e in open('/proc/self/environ', 'rb').read().split(b'\\0') if e)\n"
    f"print(repr(names), os.environ.get({MARK!r}), sys.flags.no_site)"
)
# the kernel's source as shipped, compiled without running its `main`: whether it was started clean
STARTED_CLEAN = (
    "import sys; kernel = {'__name__': 'kernel'}\n"
    "exec(compile(sys.argv[1], 'kernel_server.py', 'exec'), kernel)\n"
    "print(kernel['started_clean']())"
)


def test_allowed_keeps_exactly_the_names_the_table_keeps() -> None:
    assert {name: kernel_server.allowed(name) for name in TABLE} == TABLE


def test_boot_keeps_what_allowed_keeps_sets_the_mark_and_starts_once_with_site() -> None:
    env = dict.fromkeys(TABLE, "") | {MARK: "0"}
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", kernel_server.BOOT, BOOTED], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    kept = sorted([name for name in TABLE if TABLE[name]] + [MARK])
    assert done.stdout == f"{kept!r} 1 0\n"


def test_started_clean_needs_the_mark_set_to_1_and_allowed_names_only() -> None:
    """What `main` re-execs for: its one check, so the mark's value is part of it."""
    cases = {
        (("PATH", "/usr/bin"), (MARK, "1")): True,
        (("LC_ALL", "C"), (MARK, "1")): True,
        ((MARK, "1"),): True,
        (("PATH", "/usr/bin"),): False,  # no mark: not started by BOOT or `main`
        (("PATH", "/usr/bin"), (MARK, "0")): False,
        (("PATH", "/usr/bin"), (MARK, "")): False,
        (("PATH", "/usr/bin"), (MARK, "1"), ("OPENAI_API_KEY", "canary")): False,
        (("PWD", "/workspace"), (MARK, "1")): False,
    }
    found = {}
    for variables in cases:
        done = subprocess.run(
            [sys.executable, "-I", "-c", STARTED_CLEAN, kernel_source()],
            env=dict(variables), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        found[variables] = done.stdout == "True\n"
    assert found == cases
