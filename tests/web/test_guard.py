"""The boundary of `coderoom serve`: no token, no API; no CSRF token, no change; an unexpected
Host, Origin or size, refused; every response with the strict headers. Against the real server."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from coderoom.web.guard import MAX_BODY_BYTES
from coderoom.web.headers import PAGE_CSP
from web.served import Served


@pytest.mark.parametrize("path", ["/api/config", "/api/runs", "/api/sessions", "/api/runs/x/files",
                                  "/api/runs/x/file?path=output/a", "/api/runs/x/zip", "/static/index.html"])
def test_a_request_without_the_token_is_refused(server: Served, path: str) -> None:
    reply = server.request("GET", path)
    assert reply.status == 401
    assert reply.headers["www-authenticate"].startswith("Bearer")
    assert b"token" in reply.body
    assert b"csrf" not in reply.body.lower()


def _changed(token: str) -> str:
    """`token` with its last character replaced by another one."""
    return token[:-1] + ("A" if token[-1] != "A" else "B")


def test_a_wrong_token_is_refused(server: Served) -> None:
    for wrong in (_changed(server.token), "", server.token[:-1], server.token + "A"):
        assert server.request("GET", "/api/config", {"Authorization": f"Bearer {wrong}"}).status == 401, wrong
    for header in (server.token, f"Basic {server.token}", f"Bearer{server.token}x"):
        assert server.request("GET", "/api/config", {"Authorization": header}).status == 401, header
    assert server.request("GET", "/api/config", {"Authorization": f"bearer {server.token}"}).status == 200


def test_no_credential_is_in_a_cookie_or_a_url(server: Served) -> None:
    # W01: a cookie for 127.0.0.1 goes to every port of it; the token must not be one
    for path in ("/", f"/?token={server.token}", "/api/config"):
        reply = server.authed("GET", path)
        assert "set-cookie" not in reply.headers, path
        assert server.token.encode() not in reply.body, path
    assert server.request("GET", "/api/config", {"Cookie": f"coderoom_token={server.token}"}).status == 401
    assert server.request("GET", f"/api/config?token={server.token}").status == 401


def test_the_page_itself_is_public_and_secret_free(server: Served) -> None:
    for path in ("/", "/static/app.js", "/static/app.css"):
        reply = server.request("GET", path)
        assert reply.status == 200, path
    page = server.request("GET", "/")
    assert b'<script src="/static/app.js"' in page.body
    assert server.request("POST", "/", {"Content-Length": "0"}).status == 401  # only GET/HEAD are public


def test_the_page_has_the_strict_csp_and_no_inline_script(server: Served) -> None:
    page = server.request("GET", "/")
    assert page.headers["content-security-policy"] == PAGE_CSP
    assert "script-src 'self';" in PAGE_CSP and "unsafe" not in PAGE_CSP
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["referrer-policy"] == "no-referrer"
    assert b"<script>" not in page.body and not re.search(rb"\son[a-z]+=", page.body)  # no inline script or handler


def test_an_unexpected_host_is_refused_even_with_the_token(server: Served) -> None:
    # DNS rebinding: a page on evil.example resolving to 127.0.0.1 sends its own Host header
    for host in ("evil.example", f"evil.example:{server.port}", f"127.0.0.1:{server.port + 1}", ""):
        reply = server.request("GET", "/api/config", {"Host": host, "Authorization": server.auth})
        assert reply.status == 421, host
    assert server.request("GET", "/api/config", {"Host": f"localhost:{server.port}", "Authorization": server.auth}).status == 200


def _csrf(server: Served) -> str:
    return json.loads(server.authed("GET", "/api/config").body)["csrf"]


def test_a_state_changing_request_needs_the_csrf_token(server: Served) -> None:
    body = json.dumps({"request": "hello"}).encode()
    assert server.authed("POST", "/api/sessions/none/ask", body=body).status == 403
    assert server.authed("POST", "/api/sessions/none/ask", {"X-Coderoom-CSRF": "wrong"}, body).status == 403
    # with it, the request reaches the route (which has no such session)
    assert server.authed("POST", "/api/sessions/none/ask", {"X-Coderoom-CSRF": _csrf(server)}, body).status == 404
    # the CSRF token is no token: without the bearer token it opens nothing
    assert server.request("POST", "/api/sessions/none/ask", {"X-Coderoom-CSRF": _csrf(server)}, body).status == 401


@pytest.mark.parametrize("action", ["ask", "stop", "close"])
def test_every_session_action_needs_the_csrf_and_bearer_tokens(server: Served, action: str) -> None:
    path = f"/api/sessions/none/{action}"
    assert server.authed("POST", path).status == 403
    assert server.authed("POST", path, {"X-Coderoom-CSRF": _csrf(server)}).status == 404  # reached the route
    assert server.request("POST", path, {"X-Coderoom-CSRF": _csrf(server)}).status == 401


def test_another_origin_or_a_cross_site_fetch_is_refused(server: Served) -> None:
    headers = {"X-Coderoom-CSRF": _csrf(server)}
    for extra in ({"Origin": "http://evil.example"}, {"Origin": "null"}, {"Sec-Fetch-Site": "cross-site"},
                  {"Sec-Fetch-Site": "same-site"}):  # fmt: skip
        assert server.authed("POST", "/api/sessions/none/close", {**headers, **extra}).status == 403, extra
    same = {"Origin": f"http://127.0.0.1:{server.port}", "Sec-Fetch-Site": "same-origin"}
    assert server.authed("POST", "/api/sessions/none/close", {**headers, **same}).status == 404


def test_a_body_over_the_bound_is_refused_by_its_length(server: Served) -> None:
    headers = {"X-Coderoom-CSRF": _csrf(server), "Content-Length": str(MAX_BODY_BYTES + 1)}
    reply = server.authed("POST", "/api/sessions", headers, body=b"")
    assert reply.status == 413


def test_a_non_loopback_address_needs_allow_remote(tmp_path: Path) -> None:
    # refused before anything is bound: no socket is opened on that address
    done = subprocess.run([sys.executable, "-m", "coderoom", "serve", "--host", "0.0.0.0", "--runs-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2
    assert "--allow-remote" in done.stderr
    assert "token" not in done.stdout


def test_a_model_the_server_cannot_resolve_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "coderoom", "serve", "--model", "nosuch:thing", "--runs-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2
    assert "unknown provider" in done.stderr
