"""run_python against a real sandbox session: state, values, output bounds, figures, timeouts,
crashes, and what the kernel can see of the host."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import re
import time
from pathlib import Path

import pytest
from agents.tool import ToolOutputImage, ToolOutputText
from kernel_fixtures import kernel_backend, quick_tool, session, tool  # noqa: F401 (fixtures)
from PIL import Image

from coderoom.record.events import MAX_TABLE_COLUMNS, MAX_TABLE_ROWS, MAX_TABLE_TEXT_CHARS
from coderoom.sandboxes.sdk_session_adapter import backend_session
from coderoom.tools.inside import kernel_server
from coderoom.tools.python_kernel import (
    LOST,
    CellReply,
    PythonKernel,
    RunPythonTool,
    keeps_processes,
)


def text_of(result: object) -> str:
    if isinstance(result, str):
        return result
    assert isinstance(result, list)
    return "\n".join(part.text for part in result if isinstance(part, ToolOutputText))


async def test_state_persists_and_last_value_is_shown(tool: RunPythonTool) -> None:
    first = await tool.run("x = 40\nx + 1")
    assert "[cell 1: ok" in first and "[Out 1]\n41" in first
    second = await tool.run("x += 2\nprint('x is', x)\nx")
    assert "[stdout]\nx is 42" in second and "[Out 2]\n42" in second
    assert "[Out 3]" not in await tool.run("y = x * 2")  # an assignment shows no value
    assert "[Out 4]\n84" in await tool.run("y")


async def test_dataframe_and_series_render_as_compact_tables(tool: RunPythonTool) -> None:
    out = await tool.run(
        "import pandas as pd\n"
        "df = pd.DataFrame({'hour': [i % 24 for i in range(8760)], 'kwh': [float(i) for i in range(8760)]})\n"
        "df"
    )
    assert "DataFrame: 8760 rows x 2 columns (hour: int64, kwh: float64)" in out
    assert "..." in out and len(out) < 3000  # head and tail rows, not 8760 lines
    series = await tool.run("df.groupby('hour')['kwh'].mean()")
    assert "Series 'kwh': 24 rows, dtype float64" in series
    assert "display" in await tool.run("display(df.head(2)); 'display'")


async def test_a_dataframe_value_comes_as_a_bounded_table_for_the_page(tool: RunPythonTool) -> None:
    _, cell = await tool.run_cell(
        "import pandas as pd\n"
        "df = pd.DataFrame({'hour': [0, 1, 2], 'kwh': [1.5, 2.0, None], 'site': ['a', 'b', 'c']})\n"
        "df"
    )
    assert cell is not None and cell.table is not None
    assert cell.value is not None and "DataFrame: 3 rows x 3 columns" in cell.value  # the model's text stays
    table = cell.table
    assert (table.kind, table.rows, table.columns) == ("DataFrame", 3, 3)
    assert table.header == ["hour", "kwh", "site"] and table.index == ["0", "1", "2"]
    assert table.data == [["0", "1.5", "a"], ["1", "2.0", "b"], ["2", "nan", "c"]]

    _, series = await tool.run_cell("df.set_index('site')['kwh']")
    assert series is not None and series.table is not None
    assert (series.table.kind, series.table.rows, series.table.columns) == ("Series", 3, 1)
    assert series.table.header == ["kwh"] and series.table.index == ["a", "b", "c"]
    _, plain = await tool.run_cell("[1, 2, 3]")
    assert plain is not None and plain.value == "[1, 2, 3]" and plain.table is None


async def test_a_huge_frame_is_cut_to_the_table_bounds(tool: RunPythonTool) -> None:
    _, cell = await tool.run_cell(
        "import numpy as np, pandas as pd\n"
        "big = pd.DataFrame(np.arange(1_000_000).reshape(10_000, 100), columns=[f'c{i}' for i in range(100)])\n"
        "big['c0'] = big['c0'].astype(object)\n"
        "big.iloc[0, 0] = 'x' * 1_000_000\n"
        "big"
    )
    assert cell is not None and cell.table is not None
    table = cell.table
    assert (table.rows, table.columns) == (10_000, 100)  # the true shape
    assert len(table.index) == len(table.data) == kernel_server.MAX_TABLE_ROWS == MAX_TABLE_ROWS
    assert len(table.header) == kernel_server.MAX_TABLE_COLUMNS == MAX_TABLE_COLUMNS
    assert all(len(row) == MAX_TABLE_COLUMNS for row in table.data)
    assert table.header[-1] == "c19" and table.index[-1] == "49"
    first = table.data[0][0]
    assert len(first) == kernel_server.MAX_TABLE_TEXT == MAX_TABLE_TEXT_CHARS and first.startswith("xxx") and first.endswith("\u2026")
    assert table.data[1][1] == "101"


def test_a_reply_with_a_forged_table_keeps_its_text_and_loses_the_table() -> None:
    # the sandbox writes the reply: a table out of bounds is dropped, not the whole cell
    table = {"kind": "DataFrame", "rows": 10**6, "columns": 1, "header": ["a"],
             "index": ["0"] * 51, "data": [["x" * 201]] * 51}  # fmt: skip
    reply = CellReply.model_validate_json(json.dumps({"status": "ok", "stdout": "out", "value": "v", "table": table}))
    assert reply.table is None and (reply.stdout, reply.value) == ("out", "v")
    assert CellReply.model_validate_json('{"status": "ok", "table": [1, 2]}').table is None


async def test_stdout_stderr_and_subprocess_output_are_captured(tool: RunPythonTool) -> None:
    out = await tool.run(
        "import sys, subprocess\nprint('to out')\nprint('to err', file=sys.stderr)\n"
        "subprocess.run(['echo', 'from a child'])"
    )
    stdout = out.split("[stdout]\n")[1].split("[stderr]")[0]
    assert "to out" in stdout and "from a child" in stdout
    assert "to err" in out.split("[stderr]\n")[1]


async def test_outputs_and_tracebacks_are_bounded(tool: RunPythonTool) -> None:
    flood = await tool.run("print('a' * 500_000)\nprint('THE END')")
    assert "bytes of output omitted" in flood and "THE END" in flood
    assert len(flood) < kernel_server.STREAM_HEAD + kernel_server.STREAM_TAIL + 500
    value = await tool.run("'v' * 100_000")
    assert "characters omitted" in value and len(value) < kernel_server.MAX_VALUE + 500
    error = await tool.run("def f():\n    raise ValueError('e' * 100_000)\nf()")
    assert "[cell 3: error" in error and "ValueError" in error
    assert len(error) < kernel_server.MAX_TRACEBACK + 500
    assert 'File "<cell-3>", line 3' in error and "kernel_server" not in error


async def test_syntax_error_is_reported(tool: RunPythonTool) -> None:
    out = await tool.run("def broken(:\n    pass")
    assert "[error]" in out and "SyntaxError" in out
    assert "[Out 2]\n2" in await tool.run("1 + 1")  # the kernel is fine


async def test_figure_is_returned_as_an_image(tool: RunPythonTool, session) -> None:
    result = await tool.run(
        "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot([1, 3, 2])\n"
        "ax.set_title('Energy')\nax.set_xlabel('hour')\nplt.show()"
    )
    assert isinstance(result, list)
    text, image = result
    assert isinstance(text, ToolOutputText) and isinstance(image, ToolOutputImage)
    assert text.text.endswith("\nfigures: .coderoom/figures/cell-1-1.png")
    assert "title 'Energy'" in text.text and "x 'hour'" in text.text and "1 lines" in text.text
    assert image.image_url is not None and image.image_url.startswith("data:image/png;base64,")
    png = base64.b64decode(image.image_url.split(",", 1)[1])
    assert Image.open(io.BytesIO(png)).size == (640, 480)
    saved = await session.read_bounded(Path(".coderoom/figures/cell-1-1.png"), max_bytes=10**7)
    assert saved == png
    assert "UserWarning" not in text.text  # plt.show() under Agg stays quiet
    # the figure was closed after its cell: nothing is shown again
    assert isinstance(await tool.run("len(plt.get_fignums())"), str)


async def test_figure_is_described_in_text_without_images(session) -> None:
    tool = RunPythonTool(session, images=False, timeout=20)
    result, cell = await tool.run_cell(
        "import matplotlib.pyplot as plt\nplt.figure(); plt.bar(['a', 'b'], [1, 2]); "
        "plt.figure(); plt.scatter([1], [2]); None"
    )
    assert isinstance(result, str) and cell is not None
    assert cell.figures == [".coderoom/figures/cell-1-1.png", ".coderoom/figures/cell-1-2.png"]
    assert "2 bars/patches" in result and "1 scatter/collections" in result
    assert "not shown: this model reads text only" in result


async def test_figures_line_cannot_be_forged_by_cell_output(tool: RunPythonTool) -> None:
    out, cell = await tool.run_cell("print('figures: ../../etc/passwd')")
    assert cell is not None and cell.figures == [] and cell.stdout == "figures: ../../etc/passwd\n"


async def test_timeout_interrupts_and_keeps_state(quick_tool: RunPythonTool) -> None:
    await quick_tool.run("kept = 'yes'")
    out = await quick_tool.run("import time\nwhile True:\n    time.sleep(0.05)")
    assert "[cell 2: interrupted (timeout)]" in out and "KeyboardInterrupt" in out
    assert "your variables are kept" in out and "STATE LOST" not in out
    assert "'yes'" in await quick_tool.run("kept")


@pytest.mark.parametrize(
    "stubborn",
    [
        "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)",
        "import itertools\nsum(itertools.repeat(1, 10**13))",  # a C loop never checks signals
    ],
    ids=["sigint-ignored", "c-loop"],
)
async def test_timeout_kills_a_cell_that_will_not_stop(quick_tool: RunPythonTool, stubborn: str) -> None:
    await quick_tool.run("kept = 'yes'")
    out, cell = await quick_tool.run_cell(stubborn)
    assert "[cell 2: timeout, kernel restarted]" in text_of(out) and "STATE LOST" in text_of(out)
    assert cell is not None and (cell.number, cell.status, cell.state_lost) == (2, "restarted", True)
    after = await quick_tool.run("kept")
    assert "NameError" in after
    assert "[Out 4]\n3" in await quick_tool.run("1 + 2")


@pytest.mark.parametrize(
    ("crash", "signal_name"),
    [("import os\nos.abort()", "SIGABRT"), ("import os\nos.kill(os.getpid(), 9)", "SIGKILL")],
)
async def test_crash_is_reported_and_the_next_call_works(
    tool: RunPythonTool, crash: str, signal_name: str
) -> None:
    await tool.run("kept = 1")
    out, cell = await tool.run_cell(crash)
    assert cell is not None and (cell.status, cell.state_lost, cell.fresh_kernel) == ("crashed", True, False)
    out = text_of(out)
    assert "[cell 2: kernel crashed and was restarted]" in out
    assert f"killed by {signal_name}" in out and "STATE LOST" in out
    assert "NameError" in await tool.run("kept")
    assert "[Out 4]\n2" in await tool.run("1 + 1")


async def test_killed_supervisor_is_replaced(tool: RunPythonTool) -> None:
    await tool.run("kept = 1")
    gone = await tool.run("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nimport time; time.sleep(5)")
    assert "went away during this cell" in gone and "STATE LOST" in gone
    # a cell too large for one argument travels as a file, and survives the restart in between
    big = "numbers = [" + ",".join(str(i) for i in range(40_000)) + "]\n'kept' in globals()"
    after = await tool.run(big)
    assert "[Out 3]\nFalse" in after and LOST not in after  # the loss was reported once, above
    assert "[Out 4]\n5" in await tool.run("2 + 3")


async def test_kernel_environment_holds_no_host_secrets(
    kernel_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agents.sandbox import Manifest

    from coderoom.sandboxes import SandboxSpec
    from coderoom.sandboxes.session import open_session

    secret = "sk-coderoom-test-secret-0451"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    async with open_session(SandboxSpec(backend=kernel_backend), Manifest()) as live:
        if not keeps_processes(live):
            pytest.fail(f"{kernel_backend}: the session cannot keep a process between commands")
        tool = RunPythonTool(live, images=False, timeout=20)
        out = await tool.run(
            "import os\n"
            "own = open('/proc/self/environ', 'rb').read()\n"
            "parent = open(f'/proc/{os.getppid()}/environ', 'rb').read()\n"
            f"[k for k in os.environ if 'SECRET' in k or 'KEY' in k], {secret!r}.encode() in own + parent"
        )
    assert "[Out 1]\n([], False)" in out


async def test_the_kernel_runs_with_site_in_the_clean_environment_after_one_exec(tool: RunPythonTool) -> None:
    """Its first process (`python3 -I -S`) only clears the environment and execs the kernel
    without -S: one interpreter start with site-packages, whose packages cells import."""
    out = await tool.run(
        "import os, sys\n"
        "sys.flags.no_site, '-S' in sys.orig_argv, os.environ.get('CODEROOM_KERNEL'), 'PWD' in os.environ"
    )
    assert "[Out 1]\n(0, False, '1', False)" in out
    assert "[cell 2: ok" in await tool.run("import pandas")  # from the sandbox's site-packages


async def test_large_cells_go_through_a_file(tool: RunPythonTool) -> None:
    code = "numbers = [" + ",".join(str(i) for i in range(40_000)) + "]\nlen(numbers)"
    assert len(code) > 200_000
    assert "[Out 1]\n40000" in await tool.run(code)


async def test_tool_schema_and_invocation(tool: RunPythonTool) -> None:
    assert tool.name == "run_python" and tool.strict_json_schema
    assert tool.params_json_schema == {
        "type": "object",
        "properties": {"code": {"type": "string", "description": "Python source to run."}},
        "required": ["code"],
        "additionalProperties": False,
    }
    out = await tool.on_invoke_tool(None, json.dumps({"code": "6 * 7"}))  # type: ignore[arg-type]
    assert "[Out 1]\n42" in out
    cell = tool.take_cell("run_python")  # the call id, when the SDK gives none: the tool's name
    assert cell is not None and (cell.number, cell.status, cell.value) == (1, "ok", "42")
    assert tool.take_cell("run_python") is None  # taken once, by the recording hook
    assert "needs JSON arguments" in await tool.on_invoke_tool(None, "not json")  # type: ignore[arg-type]


async def test_capability_binds_to_the_session(session) -> None:
    capability = PythonKernel(images=False, timeout=5)
    capability.bind(session)
    (tool,) = capability.tools()
    assert isinstance(tool, RunPythonTool) and tool.timeout == 5 and tool.images is False
    assert "run_python" in (await capability.instructions(session.state.manifest) or "")
    assert re.search(r"interrupted after 5 s", tool.description)


async def test_the_kernel_runs_on_the_sdks_own_unix_local() -> None:
    """run_python needs nothing of coderoom's backends: any SDK session that keeps processes."""
    from agents.sandbox import Manifest

    from coderoom.sandboxes import SandboxSpec
    from coderoom.sandboxes.session import open_session

    spec = SandboxSpec(backend="unix_local")
    async with open_session(spec, Manifest(), unconfined_no_isolation=True) as live:
        assert keeps_processes(live)
        tool = RunPythonTool(live, images=False, timeout=20)
        await tool.run("x = 41")
        out = await tool.run("x + 1")
    assert "42" in str(out)


async def test_every_coderoom_backend_offers_run_python(backend: str) -> None:
    """Both coderoom backends keep a process between commands, so the model gets the kernel."""
    from agents.sandbox import Manifest

    from coderoom.sandboxes import SandboxSpec
    from coderoom.sandboxes.session import open_session

    async with open_session(SandboxSpec(backend=backend), Manifest()) as live:
        assert keeps_processes(live)
        capability = PythonKernel()
        capability.bind(live)
        assert [tool.name for tool in capability.tools()] == ["run_python"]
        assert await capability.instructions(live.state.manifest)


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


async def test_a_cell_flooding_the_kernels_own_streams_costs_the_host_nothing(tool: RunPythonTool) -> None:
    """Attack B01/B13: code in a cell writes 160 MiB into the supervisor's stdout and stderr
    (reopened through /proc, where the backend lets it), also after the cell returned. The host
    keeps at most output_bytes of a long-lived process's output, so its memory stays put.
    Each stream gets 80 MiB, past the 64 MiB the host may grow by on its own; the check comes once
    the flood has ended (the cell's thread says so in a file), not after a fixed wait."""
    code = (
        "import os, threading, time\n"
        "def flood():\n"
        "    for name in ('1', '2'):\n"
        "        try:\n"
        "            fd = os.open('/proc/%d/fd/%s' % (os.getppid(), name), os.O_WRONLY)\n"
        "        except OSError:\n"
        "            continue\n"
        "        for _ in range(40):\n"
        "            os.write(fd, b'A' * (2 << 20))\n"
        "    open('flood-ended', 'w').close()\n"
        "threading.Thread(target=flood, daemon=True).start()\n"
        "'started'"
    )
    before = _rss_mib()
    assert "started" in str(await tool.run(code))
    deadline = time.monotonic() + 120  # the flood goes on after the cell returned
    while "\nTrue" not in str(await tool.run("import os; os.path.exists('flood-ended')")):
        assert time.monotonic() < deadline, "the flood never ended"
        await asyncio.sleep(0.2)
    out = await tool.run("1 + 1")
    assert "2" in str(out)  # the kernel still answers
    assert _rss_mib() - before < 64, "the host buffered what the sandbox wrote"


async def test_a_warm_cell_starts_no_sandbox_command(
    tool: RunPythonTool, session, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 25: a warm cell, an interrupt and the pool's health check reach the kernel over
    the channel kept open for the session, so none of them starts a sandbox command (no exec,
    no live process); a kernel killed from the shell is replaced by a new channel."""
    await tool.run("x = 1")  # starts the kernel
    backend = backend_session(session)
    started: list[str] = []
    for name in ("_exec_internal", "_start_live", "_start_channel"):
        original = getattr(backend, name, None)  # _start_channel: None before issue 25

        def spy(*args: object, _name: str = name, _original=original, **kwargs: object):  # type: ignore[no-untyped-def]
            started.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(backend, name, spy, raising=False)
    for expected in (2, 3, 4):
        assert f"\n{expected}" in await tool.run("x += 1\nx")
    assert await tool.client.answers()
    assert not await tool.client.interrupt()  # no cell in flight
    assert started == []
    # the supervisor killed between two cells: the next one says so and gets a new channel
    await tool.run("import os, threading\nthreading.Timer(0.2, os.kill, (os.getppid(), 9)).start()")
    await asyncio.sleep(1.0)
    after = await tool.run("'x' in globals()")
    assert LOST in after and "\nFalse" in after
    assert started == ["_start_channel"]


async def test_lines_forged_on_the_kernels_channel_are_skipped(tool: RunPythonTool) -> None:
    """Hostile data on the channel (a cell writes into its supervisor's stdout, where the
    backend lets it): a line nested past the JSON parser's depth, one over MAX_LINE with no end,
    replies for requests nobody made and lines that are not objects are skipped, and the cell's
    own reply still arrives, bounded and validated."""
    code = (
        "import os\n"
        "try:\n"
        "    fd = os.open('/proc/%d/fd/1' % os.getppid(), os.O_WRONLY)\n"
        "except OSError:\n"
        "    fd = None\n"
        "if fd is not None:\n"
        "    os.write(fd, b'[' * 300_000 + b'\\n')\n"
        "    os.write(fd, b'{\"id\": \"00000000deadbeef\", \"reply\": {\"status\": \"ok\"}}\\n[1, 2]\\nnot json\\n')\n"
        "    os.write(fd, b'x' * (17 << 20))\n"
        "    os.write(fd, b'\\n')\n"
        "'survived'"
    )
    assert "[Out 1]\n'survived'" in text_of(await tool.run(code))
    assert "[Out 2]\n3" in text_of(await tool.run("1 + 2"))
