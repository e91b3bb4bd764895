"""Files of a run folder through the server: previews built on the server within bounds, images
only when their bytes are images, downloads as attachments with a sandboxing CSP, no link or
`..` followed, zips bounded. The run folder is forged (`hostile_run`)."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from urllib.parse import quote

import nbformat
import pytest

from coderoom.export.notebook import build_notebook
from coderoom.hostile.preview import MAX_PREVIEW_ROWS
from coderoom.web.headers import FILE_CSP
from support.planted import GIT_CONFIGS, REFUSED, plant_on_disk
from web.hostile_run import CANARY, PNG, active_parts, forge_run
from web.served import Served


@pytest.fixture(scope="module")
def forged(server: Served) -> str:
    return forge_run(server.runs_dir).name


def _json(server: Served, path: str) -> object:
    reply = server.authed("GET", path)
    assert reply.status == 200, reply.body
    return json.loads(reply.body)


def _preview(server: Served, run: str, path: str) -> dict:
    return _json(server, f"/api/runs/{run}/preview?path={quote(path)}")  # type: ignore[return-value]


def test_past_runs_are_listed_with_their_record_summary(server: Served, forged: str) -> None:
    runs = _json(server, "/api/runs")
    (run,) = [r for r in runs if r["name"] == forged]  # type: ignore[union-attr]
    assert run["status"] == "ok" and CANARY in run["request"] and run["session"] is None


def test_the_files_of_a_run_leave_out_links(server: Served, forged: str) -> None:
    paths = [f["path"] for f in _json(server, f"/api/runs/{forged}/files")["files"]]  # type: ignore[index]
    assert "output/report.md" in paths and "run.jsonl" in paths
    assert not any(p.startswith(("output/passwd", "output/outside")) for p in paths)
    assert paths.index("output/report.md") < paths.index("run.jsonl")  # outputs first


@pytest.mark.parametrize("path", ["output/passwd", "output/outside/passwd", "../../etc/passwd", "/etc/passwd", ""])
def test_no_path_reaches_outside_the_run_folder(server: Served, forged: str, path: str) -> None:
    for kind in ("preview", "file"):
        reply = server.authed("GET", f"/api/runs/{forged}/{kind}?path={quote(path)}")
        assert reply.status in (400, 404), (kind, path, reply.status)
        assert b"root:" not in reply.body


@pytest.mark.parametrize("name", ["..", ".", "..%2F..%2Fetc", "%2Fetc", ".hidden"])
def test_a_run_name_is_one_plain_folder_name(server: Served, name: str) -> None:
    assert server.authed("GET", f"/api/runs/{name}/files").status == 404


def test_markdown_is_rendered_on_the_server_and_sanitised(server: Served, forged: str) -> None:
    html = _preview(server, forged, "output/report.md")["html"]
    assert f"<h1>Report {CANARY}</h1>" in html
    assert active_parts(html) == []
    assert "&lt;script&gt;" in html  # the source's HTML is visible text
    assert '<a href="https://example.invalid/ok" rel="noopener noreferrer nofollow">' in html
    assert "<table>" in html


def test_a_csv_is_a_bounded_table_of_text(server: Served, forged: str) -> None:
    table = _preview(server, forged, "output/table.csv")
    assert table["kind"] == "csv"
    assert table["header"] == ["name", "note"]
    assert CANARY in table["rows"][0][0]  # the hostile text stays text: the page puts it in with textContent
    assert len(table["rows"]) == MAX_PREVIEW_ROWS
    assert any("rows" in note for note in table["cut"])


def test_an_image_is_one_by_its_bytes_not_its_name(server: Served, forged: str) -> None:
    assert _preview(server, forged, "output/picture.txt")["kind"] == "image"
    assert _preview(server, forged, "output/not-an-image.png")["kind"] == "text"
    inline = server.authed("GET", f"/api/runs/{forged}/file?path=output/picture.txt&inline=1")
    assert inline.status == 200 and inline.body == PNG
    assert inline.headers["content-type"] == "image/png"
    assert inline.headers["content-security-policy"] == FILE_CSP
    for lying in ("output/not-an-image.png", "output/drawing.svg", "output/page.html"):
        assert server.authed("GET", f"/api/runs/{forged}/file?path={lying}&inline=1").status == 415, lying


@pytest.mark.parametrize("path", ["output/page.html", "output/drawing.svg", "output/report.md", "output/picture.txt"])
def test_a_download_is_an_attachment_that_cannot_run(server: Served, forged: str, path: str) -> None:
    reply = server.authed("GET", f"/api/runs/{forged}/file?path={path}")
    assert reply.status == 200
    assert reply.headers["content-disposition"].startswith("attachment;")
    assert reply.headers["content-type"] == "application/octet-stream"
    assert reply.headers["x-content-type-options"] == "nosniff"
    assert reply.headers["content-security-policy"] == FILE_CSP
    assert reply.body == (Path(server.runs_dir) / forged / path).read_bytes()


def test_svg_is_never_shown_as_an_image(server: Served, forged: str) -> None:
    preview = _preview(server, forged, "output/drawing.svg")
    assert preview["kind"] == "text"  # shown as its source, as text


def test_the_zip_holds_the_files_and_no_link(server: Served, forged: str) -> None:
    reply = server.authed("GET", f"/api/runs/{forged}/zip")
    assert reply.status == 200 and reply.headers["content-disposition"].startswith("attachment;")
    with zipfile.ZipFile(io.BytesIO(reply.body)) as archive:
        names = archive.namelist()
        assert archive.read("output/report.md") == (server.runs_dir / forged / "output/report.md").read_bytes()
    assert "run.jsonl" in names and not any("passwd" in n or "outside" in n for n in names)


def test_a_record_is_sent_as_bounded_data(server: Served, forged: str) -> None:
    record = _json(server, f"/api/runs/{forged}")
    types = [e["type"] for e in record["events"]]  # type: ignore[index]
    assert types == ["run_start", "model_start", "model_call", "tool_start", "tool_result", "run_end"]


def test_no_planted_form_leaves_a_run_folder_through_the_page(server: Served) -> None:
    """The exit policy over HTTP: a run folder holding every planted form (a `.git`, bare and
    split repositories, a worktree, hooks, links, a FIFO) lists, previews, serves and zips none."""
    plant_on_disk(server.runs_dir / "planted" / "output")
    (server.runs_dir / "planted" / "run.jsonl").write_text("{}\n")
    listed = _json(server, "/api/runs/planted/files")
    assert [n for n in REFUSED if f"output/{n}" in {f["path"] for f in listed["files"]}] == []  # type: ignore[index]
    assert {"output/.git", "output/src/commondir"} <= {f["path"] for f in listed["left_out"]}  # type: ignore[index]
    for name in GIT_CONFIGS:
        for kind in ("file", "preview"):
            reply = server.authed("GET", f"/api/runs/planted/{kind}?path={quote('output/' + name)}")
            assert reply.status == 400 and b"exit policy" in reply.body, (kind, name)
    with zipfile.ZipFile(io.BytesIO(server.authed("GET", "/api/runs/planted/zip").body)) as archive:
        assert [n for n in REFUSED if f"output/{n}" in archive.namelist()] == []
        assert "output/src/HEAD: " in archive.read("coderoom-left-out.txt").decode()


def test_a_run_downloads_as_the_notebook_coderoom_export_writes(server: Served, forged: str) -> None:
    run_dir = server.runs_dir / forged
    reply = server.authed("GET", f"/api/runs/{forged}/notebook")
    assert reply.status == 200, reply.body
    assert reply.headers["content-disposition"] == f'attachment; filename="{forged}.ipynb"'
    assert reply.headers["content-security-policy"] == FILE_CSP  # opened directly, it is inert too
    notebook = nbformat.reads(reply.body.decode(), as_version=4)
    nbformat.validate(notebook)
    exported = build_notebook(run_dir)
    assert [c.source for c in notebook.cells] == [c.source for c in exported.cells]
    assert CANARY in notebook.cells[0].source
    assert not list(run_dir.rglob("*.ipynb"))  # made in memory: nothing is written into the run folder


def test_the_notebook_needs_the_token_and_a_run_with_a_record(server: Served, forged: str) -> None:
    assert server.request("GET", f"/api/runs/{forged}/notebook").status == 401
    assert server.authed("GET", "/api/runs/no-such-run/notebook").status == 404
    (server.runs_dir / "no-record").mkdir()
    reply = server.authed("GET", "/api/runs/no-record/notebook")
    assert reply.status == 400 and b"run.jsonl" in reply.body
