"""The replay's error line is read from hostile bytes: the first exception, bounded, escaped."""

from __future__ import annotations

from coderoom.export.replay_error import MAX_LINE, replay_error


def _traceback(last: str) -> str:
    return f'Traceback (most recent call last):\n  File "<cell-2>", line 1, in <module>\n    x\n{last}\n'


def test_the_first_exception_is_the_cause_and_later_ones_are_counted() -> None:
    stderr = (_traceback("KeyError: 'timestamp'") + _traceback("NameError: name 'frame' is not defined")).encode()
    assert replay_error(stderr) == "KeyError: 'timestamp' (and 1 later errors)"


def test_an_error_the_original_run_had_too_is_not_the_cause() -> None:
    stderr = (_traceback("KeyError: 'missing_column'") + _traceback("KeyError: 'energy_kwh'")).encode()
    recorded = [_traceback("KeyError:  'missing_column'")]
    assert replay_error(stderr, recorded) == "KeyError: 'energy_kwh'"
    assert replay_error(_traceback("KeyError: 'missing_column'").encode(), recorded) is None


def test_without_a_traceback_the_last_line_of_stderr_is_shown() -> None:
    assert replay_error(b"warming up\nsh: 1: nosuchtool: not found\n\n") == "sh: 1: nosuchtool: not found"
    assert replay_error(b"") is None


def test_a_hostile_error_line_is_escaped_and_bounded() -> None:
    line = replay_error(_traceback("ValueError: \x1b]52;c;cGF5bG9hZA==\x07" + "a" * 10_000).encode())
    assert line is not None and "\x1b" not in line and "\x07" not in line
    assert len(line) <= MAX_LINE + 40
