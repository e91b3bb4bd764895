"""`coderoom serve`: a web page over live sessions and past runs, on 127.0.0.1 by default.

* `guard`: the boundary every request crosses: the shared Host, token and Origin checks of
  `coderoom.serving.guard` (the token given once in the URL's fragment, sent by the page as an
  Authorization header, never a cookie), then CSRF and body size.
* `bodies`: request bodies read whole and checked (a whole multipart form, bounded JSON) before
  a route acts on them.
* `headers`: the page's Content-Security-Policy and the other response headers.
* `files`: listing, previews, downloads and zips of files a sandbox wrote (hostile), from a live
  session or a run folder.
* `runs`: past runs from the runs folder, read-only and bounded.
* `live`: live sessions: open with uploads, ask, follow-ups, events as server-sent events.
* `view`: record events made into bounded JSON for the page.
* `app`: the Starlette application that puts them together; `static/` the page (no inline script).

Everything shown comes from a run record or a sandbox and is hostile: the page's script puts text
into the DOM with textContent only; the one HTML it inserts is Markdown rendered and sanitised on
the server (`hostile.markup`).
"""
