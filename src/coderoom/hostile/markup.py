"""Model-written Markdown made into HTML that does nothing but show text.

A report comes from a sandbox: it may hold `<script>`, event-handler attributes, `javascript:`
links, remote images (a request that tells a third party the report was opened) or a forged
form. It is rendered with markdown-it-py with raw HTML off (HTML in the source stays visible
text), then cleaned by nh3 (ammonia) with a short list of tags and attributes, links limited to
http, https and mailto and opened with rel="noopener noreferrer nofollow", and no image at all:
the page's CSP would block a remote one anyway, but nothing should even be asked for.
"""

from __future__ import annotations

import nh3
from markdown_it import MarkdownIt

MAX_MARKDOWN_CHARS = 200_000
"""Of one report rendered; the rest is cut with a marker (a forged 100 MB report stays fast)."""

ALLOWED_TAGS = frozenset({
    "a", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "li",
    "ol", "p", "pre", "strong", "table", "tbody", "td", "th", "thead", "tr", "ul",
})  # fmt: skip
ALLOWED_ATTRIBUTES = {"a": {"href", "title"}, "td": {"align"}, "th": {"align"}}
URL_SCHEMES = frozenset({"http", "https", "mailto"})

_renderer = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable("table").enable("strikethrough")


def markdown_html(text: str) -> str:
    """`text` (Markdown from a sandbox) as sanitised HTML: no script, handler, style, image or form."""
    if len(text) > MAX_MARKDOWN_CHARS:
        text = text[:MAX_MARKDOWN_CHARS] + f"\n\n[... {len(text) - MAX_MARKDOWN_CHARS:,} more characters not shown ...]"
    return nh3.clean(
        _renderer.render(text),
        tags=set(ALLOWED_TAGS),
        clean_content_tags={"script", "style"},
        attributes={tag: set(names) for tag, names in ALLOWED_ATTRIBUTES.items()},
        url_schemes=set(URL_SCHEMES),
        link_rel="noopener noreferrer nofollow",
        url_relative="deny",
    )
