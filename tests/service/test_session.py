"""A live session: its sandbox, kernel, workspace and conversation outlive each request, every
call lands in its record, and closing it leaves a run folder `coderoom show` reads."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from coderoom import Session
from coderoom.errors import NoSuchFile, RequestRefused, SessionClosed, WorkspaceWriteFailed
from coderoom.record import read_record
from coderoom.run import DECLINED
from coderoom.service.session import STOPPED
from coderoom.sandboxes.limits import Limits
from coderoom.tools.python_kernel import KernelClient

ROOT = Path(__file__).resolve().parents[2]
ENERGY = ROOT / "examples/building_energy/data/building_energy.csv"
CSV = b"city,temp\nOslo,3\nRome,18\nCairo,31\n"


def events_of(run_dir: Path) -> list:
    return read_record(run_dir).events


async def test_files_go_in_the_kernel_keeps_its_state_and_close_leaves_a_run_folder(backend: str, tmp_path: Path) -> None:
    host = tmp_path / "notes.txt"
    host.write_text("from the host\n")
    session = await Session.open(model="offline", sandbox=backend, runs_dir=tmp_path / "runs",
                                 files={"input/cities.csv": CSV, "input/notes.txt": host})
    try:
        first = await session.run_python("import pandas as pd\ndf = pd.read_csv('input/cities.csv')\nlen(df)")
        assert first.status == "ok" and "3" in first.text
        second = await session.run_python("import matplotlib.pyplot as plt\nplt.bar(df.city, df.temp)\nprint(df.temp.max())")
        assert second.status == "ok" and "31" in second.text
        assert len(second.images) == 1 and second.images[0].startswith(b"\x89PNG\r\n\x1a\n")
        listed = {f.path: f for f in await session.files()}
        assert listed["input/cities.csv"].size == len(CSV) and listed["input"].kind == "dir"
        assert await session.read_file("input/notes.txt") == b"from the host\n"
        command = await session.exec("wc -l < input/cities.csv; echo oops >&2; exit 3")
        assert (command.exit_code, command.stdout.strip(), command.stderr) == (3, "4", "oops\n")
        await session.write_file("output/summary.md", b"# summary\n")
    finally:
        run_dir = await session.close()
    assert await session.close() == run_dir  # idempotent
    events = events_of(run_dir)
    kinds = [e.type for e in events]
    assert kinds[:2] == ["run_start", "file_written"] and kinds[-1] == "run_end"
    assert events[-1].status == "ok" and "workspace.tar" in events[-1].saved
    assert (run_dir / "output/summary.md").read_text() == "# summary\n"
    results = [e for e in events if e.type == "tool_result"]
    assert [(r.name, r.origin) for r in results] == [("run_python", "client")] * 2 + [("exec_command", "client")]
    assert [r.cell.number for r in results[:2]] == [1, 2]
    shown = subprocess.run([sys.executable, "-m", "coderoom", "show", str(run_dir)], capture_output=True,
                           text=True, timeout=120)
    assert shown.returncode == 0 and "df = pd.read_csv('input/cities.csv')" in shown.stdout


async def test_a_follow_up_ask_continues_the_conversation_and_shares_the_kernel(tmp_path: Path) -> None:
    session = await Session.open(model="offline", runs_dir=tmp_path / "runs",
                                 files={"input/building_energy.csv": ENERGY})
    try:
        first = await session.ask("Find abnormal energy use in input/building_energy.csv and save "
                                  "output/anomalies.csv")
        assert first.status == "ok", first
        assert "abnormal event" in first.final_output
        # the analyst ran its steps in the kernel: a direct cell sees what the model's cells left
        shared = await session.run_python("print(sorted(k for k in globals() if k.endswith('_globals')))")
        assert "analyse_globals" in shared.text
        await session.ask("Now the same again, please.")
        third = await session.ask("And once more?")
        # the model saw the earlier answers: the offline analyst quotes its last report
        assert "My last report was" in third.final_output
        assert first.final_output.splitlines()[0] in third.final_output
    finally:
        run_dir = await session.close()
    events = events_of(run_dir)
    asks = [i for i, e in enumerate(events) if e.type == "ask_start"]
    assert len(asks) == 3
    inputs = [next(e for e in events[i:] if e.type == "model_call").input_items for i in asks]
    assert inputs[0] == 1 and inputs[1] > inputs[0] and inputs[2] > inputs[1]
    assert (run_dir / "output/anomalies.csv").is_file()
    shown = subprocess.run([sys.executable, "-m", "coderoom", "show", str(run_dir)], capture_output=True,
                           text=True, timeout=120)
    assert shown.returncode == 0 and "Now the same again, please." in shown.stdout


async def test_an_out_of_scope_follow_up_gets_the_offline_analysts_refusal_and_fails(tmp_path: Path) -> None:
    session = await Session.open(model="offline", runs_dir=tmp_path / "runs",
                                 files={"input/building_energy.csv": ENERGY})
    try:
        first = await session.ask("Find abnormal energy use in input/building_energy.csv and save "
                                  "output/anomalies.csv")
        follow_up = await session.ask("And which day had the most?")
    finally:
        run_dir = await session.close()
    assert first.status == "ok", first
    assert (follow_up.status, follow_up.error) == ("failed", DECLINED)
    assert follow_up.final_output.startswith("I could not answer this follow-up.")
    assert first.final_output.splitlines()[0] in follow_up.final_output  # recalled, not repeated
    assert "Method:" not in follow_up.final_output
    ends = [e for e in events_of(run_dir) if e.type == "ask_end"]
    assert [e.status for e in ends] == ["ok", "failed"]


async def test_a_sessions_run_folder_reruns_without_a_model(tmp_path: Path) -> None:
    session = await Session.open(model="offline", runs_dir=tmp_path / "runs", files={"input/cities.csv": CSV})
    await session.run_python("import pandas as pd\ndf = pd.read_csv('input/cities.csv')")
    await session.exec("mkdir -p output")
    await session.run_python("df.sort_values('temp').to_csv('output/sorted.csv', index=False)")
    run_dir = await session.close()
    again = subprocess.run([sys.executable, "-m", "coderoom", "rerun", str(run_dir), "--out", str(tmp_path / "again")],
                           capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert (tmp_path / "again/output/sorted.csv").read_text().splitlines()[1] == "Oslo,3"
    notebook = tmp_path / "session.ipynb"
    exported = subprocess.run([sys.executable, "-m", "coderoom", "export", str(run_dir), "--notebook", str(notebook)],
                              capture_output=True, text=True, timeout=120)
    assert exported.returncode == 0, exported.stderr
    assert "df.sort_values('temp')" in notebook.read_text()


async def test_limits_of_a_job_hold_in_a_session(tmp_path: Path) -> None:
    session = await Session.open(model="offline", runs_dir=tmp_path / "runs",
                                 limits=Limits(timeout=2, file_size="1M"))
    try:
        slow = await session.run_python("import time\nx = 41\ntime.sleep(30)")
        assert slow.status == "interrupted"
        assert (await session.run_python("x + 1")).text.count("42") == 1  # the kernel survived
        command = await session.exec("sleep 30")
        assert command.exit_code != 0 and "wall-clock limit" in command.stderr
        with pytest.raises(RequestRefused, match="byte limit"):
            await session.write_file("input/big.bin", b"\0" * (1024**2 + 1))
        with pytest.raises(RequestRefused, match="not a workspace path"):
            await session.write_file("../escape.txt", b"x")
        await session.exec("head -c 5000 /dev/zero > blob")
        with pytest.raises(RequestRefused, match="read limit"):
            await session.read_file("blob", max_bytes=4096)
        with pytest.raises(RequestRefused, match="no such regular file"):
            await session.read_file("missing.txt")
    finally:
        await session.close()
    with pytest.raises(SessionClosed):
        await session.run_python("1")


async def test_subscribers_see_events_as_they_are_written_and_stop_at_run_end(tmp_path: Path) -> None:
    session = await Session.open(model="offline", runs_dir=tmp_path / "runs")
    seen: list[str] = []

    async def follow() -> None:
        async for event in session.subscribe():
            seen.append(event.type)

    follower = asyncio.create_task(follow())
    await asyncio.sleep(0)
    await session.run_python("1 + 1")
    await session.close()
    await asyncio.wait_for(follower, 10)
    assert seen[:2] == ["tool_start", "tool_result"] and seen[-1] == "run_end"


async def test_over_the_wire_a_follow_up_carries_the_history_and_the_kernel_keeps_df(tmp_path: Path) -> None:
    """A real openai client against a loopback server: the model loads df with run_python in
    the first ask; the second ask's first request carries the first answer, and its cell uses df."""
    from openai_server import OpenAIServer, call, say

    steps = [
        call("run_python", code="import pandas as pd\ndf = pd.read_csv('input/cities.csv')\nlen(df)"),
        say("Loaded 3 cities into df."),
        call("run_python", code="print('max', df.temp.max())"),
        say("The hottest is 31."),
    ]
    with OpenAIServer(steps) as server:
        session = await Session.open(model=f"openai-compatible:scripted@{server.url}", runs_dir=tmp_path / "runs",
                                     files={"input/cities.csv": CSV}, environ={})
        try:
            first = await session.ask("Load input/cities.csv")
            assert (first.status, first.final_output) == ("ok", "Loaded 3 cities into df.")
            second = await session.ask("What is the highest temperature?")
            assert second.final_output == "The hottest is 31."
            direct = await session.run_python("print('min', df.temp.min())")  # the model's df, from the client
            assert "min 3" in direct.text
        finally:
            run_dir = await session.close()
        follow_up = server.requests[2].body
    sent = str(follow_up)
    assert "Load input/cities.csv" in sent and "Loaded 3 cities into df." in sent
    results = [e for e in read_record(run_dir).events if e.type == "tool_result"]
    assert [(e.origin, e.cell.status) for e in results] == [("agent", "ok"), ("agent", "ok"), ("client", "ok")]
    assert "max 31" in results[1].output


async def test_a_refused_file_at_open_leaves_no_run_folder(tmp_path: Path) -> None:
    (tmp_path / "real.csv").write_text("a\n1\n")
    (tmp_path / "link.csv").symlink_to(tmp_path / "real.csv")
    for files in ({"../up.csv": b"x"}, {"input/link.csv": tmp_path / "link.csv"},
                  {"input/big.bin": b"\0" * (1024**2 + 1)}, {"input/" + "\u00e9" * 128: b"x"}):  # 256 bytes in UTF-8
        with pytest.raises(RequestRefused):
            await Session.open(model="offline", runs_dir=tmp_path / "runs", files=files, limits=Limits(file_size="1M"))
    assert not (tmp_path / "runs").exists()


async def test_the_runs_folder_may_be_named_by_a_string(tmp_path: Path) -> None:
    # a Python API caller's plain `runs_dir="runs"` (it failed with AttributeError on .mkdir)
    session = await Session.open(model="offline", runs_dir=str(tmp_path / "runs"))
    run_dir = await session.close()
    assert run_dir.parent == tmp_path / "runs" and (run_dir / "run.jsonl").is_file()


async def test_a_file_given_as_a_string_is_refused_before_the_run_folder(tmp_path: Path) -> None:
    # text or a host path? Neither is guessed: it failed deep in the write, after the folder was made
    with pytest.raises(TypeError, match="bytes or a host file as a pathlib.Path"):
        await Session.open(model="offline", runs_dir=tmp_path / "runs", files={"input/a.txt": "hello"})
    assert not (tmp_path / "runs").exists()


async def test_a_session_that_fails_to_open_records_the_error(tmp_path: Path) -> None:
    # W09: a write the sandbox refuses half way (here a file where a folder must go) is a clear
    # refusal, and the record's run_end says error and why, not ok
    with pytest.raises(WorkspaceWriteFailed, match="did not make this folder"):
        await Session.open(model="offline", runs_dir=tmp_path / "runs", files={"a": b"x", "a/b": b"y"})
    [run_dir] = (tmp_path / "runs").iterdir()
    end = read_record(run_dir).events[-1]
    assert (end.type, end.status) == ("run_end", "error")
    assert "did not open" in end.error and "WorkspaceWriteFailed" in end.error


async def test_a_read_of_no_regular_file_is_no_such_file(backend: str, tmp_path: Path) -> None:
    # W17d: on docker a planted link came back as the SDK's WorkspaceArchiveReadError (a 500 in the page)
    session = await Session.open(model="offline", sandbox=backend, runs_dir=tmp_path / "runs")
    try:
        await session.exec("mkdir -p output/dir && ln -s /etc/passwd output/link && printf 0123456789 > output/ten")
        for path in ("output/link", "output/dir", "output/none"):
            with pytest.raises(NoSuchFile):
                await session.read_file(path)
        assert await session.read_file("output/ten", 4, head=True) == b"01234"  # the head and one more byte
        with pytest.raises(RequestRefused, match="read limit"):
            await session.read_file("output/ten", 4)
    finally:
        await session.close()


async def _until(condition: object, timeout_s: float = 60) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_stop_ends_the_ask_in_flight_interrupts_its_cell_and_keeps_the_session(tmp_path: Path) -> None:
    """Stop during an ask whose cell sleeps: the ask returns 'stopped' at once (not after the
    sleep), its ask_end says so, and the next ask runs in the same kernel (x is still 41)."""
    from openai_server import OpenAIServer, call, say

    steps = [
        call("run_python", code="x = 41\nimport time\ntime.sleep(120)"),
        call("run_python", code="print('x is', x + 1)"),
        say("x plus one is 42."),
    ]
    with OpenAIServer(steps) as server:
        session = await Session.open(model=f"openai-compatible:scripted@{server.url}", runs_dir=tmp_path / "runs", environ={})
        try:
            assert await session.stop() is None  # nothing runs yet: nothing to stop
            await session.run_python("warm = True")  # the kernel is up: the stop lands in a running cell
            asking = asyncio.create_task(session.ask("Sleep a while"))
            await _until(lambda: any(e.type == "tool_start" and e.origin == "agent" for e in events_of(session.run_dir)))
            await asyncio.sleep(1)  # the cell is in its sleep
            started = asyncio.get_running_loop().time()
            assert await session.stop() == "ask"
            stopped = await asyncio.wait_for(asking, 30)
            assert asyncio.get_running_loop().time() - started < 30
            assert (stopped.status, stopped.error) == ("stopped", STOPPED)
            follow_up = await session.ask("And now?")
            assert (follow_up.status, follow_up.final_output) == ("ok", "x plus one is 42.")
        finally:
            run_dir = await session.close()
    ends = [(e.status, e.error) for e in events_of(run_dir) if e.type == "ask_end"]
    assert ends == [("stopped", STOPPED), ("ok", None)]
    results = [e for e in events_of(run_dir) if e.type == "tool_result"]
    assert "x is 42" in results[-1].output  # the kernel kept x through the interrupt
    assert events_of(run_dir)[-1].status == "ok"  # the session ended normally afterwards


async def test_without_the_pool_the_kernel_warms_up_in_the_background_and_the_first_cell_is_still_cell_1(
    tmp_path: Path,
) -> None:
    session = await Session.open(model="offline", runs_dir=tmp_path)
    try:
        assert session._warming is not None
        assert await session._warming  # kernel started, numpy, pandas and matplotlib imported
        assert await session.interrupt() is False  # the warm-up was never a cell of the session's
        first = await session.run_python("import sys\nsorted({'numpy', 'pandas', 'matplotlib.pyplot'} & set(sys.modules))")
        assert first.status == "ok" and "matplotlib.pyplot" in first.text and "pandas" in first.text
        unbound = await session.run_python("'pandas' in dir()")
        assert unbound.status == "ok" and "False" in unbound.text  # imported, not bound: cells import their own
    finally:
        run_dir = await session.close()
    cells = [e.cell.number for e in events_of(run_dir) if e.type == "tool_result"]
    assert cells == [1, 2]


async def test_a_cell_asked_during_a_warm_up_import_goes_before_the_imports_left(tmp_path: Path) -> None:
    """The warm-up imports one module a step; a cell asked while a step runs (the kernel is up)
    waits for that step only and goes ahead of the rest: it is never held behind matplotlib's
    import, the longest, which a session that does not plot never needs."""
    session = await Session.open(model="offline", runs_dir=tmp_path)
    try:
        state = KernelClient(session._live.session).state
        async with asyncio.timeout(60):
            while not (state.started and state.warming):  # the kernel runs, its first import step too
                await asyncio.sleep(0.005)
        cell = await session.run_python("import sys\nsorted({'numpy', 'pandas', 'matplotlib.pyplot'} & set(sys.modules))")
        assert cell.status == "ok" and "'numpy'" in cell.text and "matplotlib" not in cell.text
        assert await session._warming is False  # it gave way and left the rest undone
    finally:
        run_dir = await session.close()
    assert [e.cell.number for e in events_of(run_dir) if e.type == "tool_result"] == [1]


async def test_a_first_cell_during_the_warm_up_waits_only_for_its_step(tmp_path: Path) -> None:
    session = await Session.open(model="offline", runs_dir=tmp_path)
    try:
        first = await session.run_python("1 + 1")  # at once: the warm-up gives way after its step
        assert first.status == "ok" and "2" in first.text
        assert await session._warming is False  # it stopped before all its imports
    finally:
        run_dir = await session.close()
    assert [e.cell.number for e in events_of(run_dir) if e.type == "tool_result"] == [1]
