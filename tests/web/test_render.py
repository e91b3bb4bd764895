"""The host-side renderers of sandbox data the page shows: sanitised Markdown, bounded CSV, image
types by magic bytes, upload names."""

from __future__ import annotations

import pytest

from coderoom.hostile.markup import MAX_MARKDOWN_CHARS, markdown_html
from coderoom.hostile.preview import MAX_CELL_CHARS, MAX_PREVIEW_COLUMNS, as_text, csv_table, image_type
from coderoom.web.uploads import MAX_UPLOAD_NAME_CHARS, UploadRefused, checked_name
from coderoom.record.events import AskEnd, ModelCall, RunEnd
from coderoom.web.view import MAX_LIST_ITEMS, MAX_TEXT_CHARS, bounded, event_json
from web.hostile_run import HOSTILE_MARKDOWN, PNG, SVG, active_parts


def test_markdown_keeps_its_text_and_loses_everything_active() -> None:
    html = markdown_html(HOSTILE_MARKDOWN)
    assert "&lt;script&gt;" in html  # raw HTML stays visible as text
    assert active_parts(html) == []


def test_a_huge_report_is_cut_before_rendering() -> None:
    html = markdown_html("word " * (MAX_MARKDOWN_CHARS // 2))
    assert "more characters not shown" in html


def test_csv_cells_and_columns_are_bounded() -> None:
    wide = ",".join(f"c{i}" for i in range(MAX_PREVIEW_COLUMNS + 10))
    table = csv_table(wide + "\n" + "x" * (MAX_CELL_CHARS * 3) + "\n")
    assert len(table.header) == MAX_PREVIEW_COLUMNS
    assert len(table.rows[0][0]) == MAX_CELL_CHARS
    assert any("columns" in note for note in table.cut)


def test_a_malformed_csv_is_shown_as_far_as_it_parses() -> None:
    table = csv_table('a,b\n1,2\n"unterminated\x00,3\n')
    assert table.header == ["a", "b"] and table.rows[0] == ["1", "2"]


@pytest.mark.parametrize("data, mime", [
    (PNG, "image/png"), (b"\xff\xd8\xff\xe0JFIF", "image/jpeg"), (b"GIF89a....", "image/gif"),
    (b"RIFF\x00\x00\x00\x00WEBPVP8 ", "image/webp"), (SVG, None), (b"<html>", None), (b"", None),
])  # fmt: skip
def test_image_types_come_from_magic_bytes(data: bytes, mime: str | None) -> None:
    assert image_type(data) == mime


def test_binary_is_not_text_but_a_cut_character_at_the_end_is() -> None:
    assert as_text(b"a\x00b") is None
    assert as_text("é".encode() * 3 + "é".encode()[:1]) == "ééé"
    assert as_text(b"\xff\xfe middle") is None


@pytest.mark.parametrize("name", [
    "../x.csv", "a/b.csv", "a\\b.csv", ".bashrc", "", " x.csv", "x.csv ", "x\x00.csv", "x\n.csv",
    "evil\u202egpj.csv", "zero\u200bwidth.csv", "x" * (MAX_UPLOAD_NAME_CHARS + 1), "..", ".",
])  # fmt: skip
def test_an_upload_name_must_be_one_plain_visible_name(name: str) -> None:
    with pytest.raises(UploadRefused):
        checked_name(name)


def test_a_plain_upload_name_passes() -> None:
    assert checked_name("building_energy.csv") == "building_energy.csv"
    assert checked_name("données 2024 (v2).csv") == "données 2024 (v2).csv"


def test_event_json_is_bounded() -> None:
    value = bounded({"text": "x" * (MAX_TEXT_CHARS + 5), "items": list(range(MAX_LIST_ITEMS + 5)), "deep": [[[[[[[[[[[[[[1]]]]]]]]]]]]]]})
    assert len(value["text"]) < MAX_TEXT_CHARS + 100 and "more characters" in value["text"]
    assert len(value["items"]) == MAX_LIST_ITEMS
    assert "too deep" in str(value["deep"])


def test_the_checker_of_active_html_finds_what_it_looks_for() -> None:
    # the check the sanitiser's tests rely on, on unsanitised HTML
    raw = '<script>x</script><a href="javascript:x" onclick="y">a</a><img src=x><b style="c">d</b>'
    assert active_parts(raw) == ["<script>", "a href=javascript:x", "a onclick", "<img>", "img src=x", "b style"]


def test_the_models_words_reach_the_page_as_sanitised_markdown_beside_their_text() -> None:
    call = ModelCall(turn=1, output=[{"kind": "message", "text": f"**bold** {HOSTILE_MARKDOWN}"}])
    message = event_json(call)["output"][0]
    assert "<strong>bold</strong>" in message["html"] and active_parts(message["html"]) == []
    assert message["text"].startswith("**bold**")  # the text stays, for copying and for the answer check
    end = event_json(RunEnd(status="ok", final_output="1. *one*\n2. two"))
    assert "<ol>" in end["final_html"] and "<em>one</em>" in end["final_html"]
    assert "final_html" not in event_json(AskEnd(status="error", error="boom"))  # no answer, nothing rendered


def test_every_event_the_page_gets_goes_through_event_json() -> None:
    # one place for the page's form of an event: the live stream and the past-run record both use it
    from coderoom.web import live, runs

    assert live.event_json is event_json and runs.event_json is event_json
