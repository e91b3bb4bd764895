"""How a docker sandbox's PID 1 starts (`request.INIT_BOOTSTRAP`): init.py's code compiled on the
host runs when the image's Python has the host's bytecode magic number, its source is compiled
otherwise, and neither variable is left for the commands it starts. Run here with this host's
Python as `python3 -I -S -c BOOTSTRAP`, as the container's entrypoint runs it.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from types import CodeType

import pytest

from coderoom.sandboxes.docker.request import (
    INIT_BOOTSTRAP,
    MAX_ARG_STRLEN,
    INIT_CODE_ENV,
    INIT_ENV,
    INIT_NAME,
    INIT_SOURCE,
    code_value,
    init_code,
)

SHOW = "import os, sys; sys.stdout.write('{}' + ' ' + ','.join(k for k in os.environ if k.startswith('CODEROOM')))"
SOURCE = SHOW.format("compiled-in-the-sandbox")
CODE = code_value(compile(SHOW.format("compiled-on-the-host"), INIT_NAME, "exec"))


def started(environment: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", INIT_BOOTSTRAP], env=environment, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_host_compiled_code_runs_when_the_magic_number_matches() -> None:
    assert started({INIT_ENV: SOURCE, INIT_CODE_ENV: CODE}) == "compiled-on-the-host "


@pytest.mark.parametrize(
    "code",
    [
        "0d0d0d0a:" + CODE.partition(":")[2],  # another Python's magic number
        None,  # not given (rescue.py's `docker exec` sends the source alone)
        CODE.partition(":")[0] + ":not base64 at all",
        CODE.partition(":")[0] + ":" + CODE.partition(":")[2][:100],  # cut short
    ],
    ids=["other-magic", "absent", "not-base64", "truncated"],
)
def test_the_source_is_compiled_otherwise(code: str | None) -> None:
    environment = {INIT_ENV: SOURCE} | ({INIT_CODE_ENV: code} if code is not None else {})
    assert started(environment) == "compiled-in-the-sandbox "


def _code_objects(code: CodeType) -> Iterator[CodeType]:
    yield code
    for constant in code.co_consts:
        if isinstance(constant, CodeType):
            yield from _code_objects(constant)


def test_init_code_is_init_py_compiled_and_names_no_host_path() -> None:
    import binascii
    import marshal

    sent = marshal.loads(binascii.a2b_base64(init_code().partition(":")[2]))
    compiled = compile(INIT_SOURCE, INIT_NAME, "exec")
    pairs = list(zip(_code_objects(sent), _code_objects(compiled), strict=True))
    assert len(pairs) > 50
    for ours, reference in pairs:
        assert ours.co_filename == INIT_NAME
        assert (ours.co_qualname, ours.co_code, ours.co_names) == (reference.co_qualname, reference.co_code, reference.co_names)


def test_init_code_fits_in_one_environment_string() -> None:
    """Past Linux's bound on one environment string init_code sends nothing (PID 1's execve would
    fail) and every container compiles the source again: init.py would have grown by half."""
    assert 0 < len(f"{INIT_CODE_ENV}={init_code()}") < MAX_ARG_STRLEN
