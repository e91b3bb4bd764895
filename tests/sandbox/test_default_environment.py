"""The default analysis environment (README, "The default analysis environment"): Excel and
parquet inputs work out of the box on every backend. The files are written on the host with
openpyxl and pyarrow themselves (not pandas), put into a real sandbox's workspace as inputs, and
read inside it with pandas, as an analysis would. The Docker image gets them from pip's index or,
offline (CI), from a wheel folder given to `coderoom image build --find-links`."""

from __future__ import annotations

import io
import json
from datetime import datetime
from pathlib import Path

import openpyxl
import pyarrow as pa
import pyarrow.parquet as pq
from agents.sandbox import Manifest
from agents.sandbox.entries import File
from typer.testing import CliRunner

from coderoom.cli import app
from coderoom.sandboxes import SandboxSpec
from coderoom.sandboxes.session import open_session

ROWS = [
    (datetime(2024, 1, 1, 0), 10.5, "normal"),
    (datetime(2024, 1, 1, 1), 99.0, "spike"),
    (datetime(2024, 1, 1, 2), 11.25, "normal"),
]
COLUMNS = ["timestamp", "energy_kwh", "label"]

READ_BOTH = """
import json, pandas as pd
for path in ("input/energy.xlsx", "input/energy.parquet"):
    reader = pd.read_excel if path.endswith(".xlsx") else pd.read_parquet
    df = reader(path)
    print(json.dumps({
        "path": path,
        "columns": list(df.columns),
        "timestamps": [t.isoformat() for t in df["timestamp"]],
        "energy_kwh": df["energy_kwh"].tolist(),
        "labels": df["label"].tolist(),
    }))
"""


def _xlsx() -> bytes:
    book = openpyxl.Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.append(COLUMNS)
    for row in ROWS:
        sheet.append(list(row))
    buffer = io.BytesIO()
    book.save(buffer)
    return buffer.getvalue()


def _parquet() -> bytes:
    table = pa.table({name: [row[i] for row in ROWS] for i, name in enumerate(COLUMNS)})
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


async def test_pandas_reads_excel_and_parquet_inputs_in_the_sandbox(backend: str) -> None:
    manifest = Manifest(
        entries={"input/energy.xlsx": File(content=_xlsx()), "input/energy.parquet": File(content=_parquet())}
    )
    async with open_session(SandboxSpec(backend=backend), manifest) as session:
        result = await session.exec("python3", "-c", READ_BOTH, shell=False)
    assert result.exit_code == 0, result.stderr.decode(errors="replace")[-2000:]
    expected = {
        "columns": COLUMNS,
        "timestamps": [row[0].isoformat() for row in ROWS],
        "energy_kwh": [row[1] for row in ROWS],
        "labels": [row[2] for row in ROWS],
    }
    read = [json.loads(line) for line in result.stdout.decode().splitlines()]
    assert [r.pop("path") for r in read] == ["input/energy.xlsx", "input/energy.parquet"]
    assert read == [expected, expected]


def test_image_build_names_a_wheel_folder_that_does_not_exist_in_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "wheels"
    result = CliRunner().invoke(app, ["image", "build", "--find-links", str(missing)])
    assert result.exit_code == 2
    assert result.output.strip() == f"--find-links: {str(missing)!r} is neither a URL nor a folder that exists"
