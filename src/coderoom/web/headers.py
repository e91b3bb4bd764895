"""Response headers for everything the server sends.

The page's CSP allows only this server's own script, style, images and connections (and
`blob:` images: the page fetches images with its Authorization header and shows the blob): no inline
script or style, no frame, no form posting elsewhere, no <base>. A file a sandbox wrote is served
with `Content-Security-Policy: sandbox` (a document opened from it gets an opaque origin and no
script), `X-Content-Type-Options: nosniff` and, unless it is a checked image, as an attachment.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

PAGE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
FILE_CSP = "sandbox; default-src 'none'; frame-ancestors 'none'"
COMMON = {
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
    "cache-control": "no-store",
}


class SecurityHeaders:
    """ASGI middleware: the page CSP on every response that did not set its own, and COMMON."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                if "content-security-policy" not in headers:
                    headers["content-security-policy"] = PAGE_CSP
                for name, value in COMMON.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)
