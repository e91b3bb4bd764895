"""Files a browser uploads to open a session: names checked, sizes bounded, before any sandbox.

An upload lands at `input/<name>` in the workspace. The name is the browser's (so anyone's): it
must be one plain file name (no folder, no `..`, no control or invisible character, not hidden)
and short, in characters and in UTF-8 bytes; the files are counted and each one and their total are bounded while they are read.
"""

from __future__ import annotations

import re

from starlette.datastructures import FormData, UploadFile

from ..hostile.names import MAX_NAME_BYTES, UnsafePath, safe_relative_path

MAX_UPLOAD_FILES = 32
MAX_UPLOAD_BYTES = 64 * 1024**2
"""Of one uploaded file."""
MAX_UPLOAD_TOTAL_BYTES = 256 * 1024**2
MAX_UPLOAD_NAME_CHARS = 128
UPLOAD_FOLDER = "input"
_PLAIN_NAME = re.compile(r"^[^\x00-\x1f\x7f-\x9f/\\\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff]+$")


class UploadRefused(ValueError):
    """An upload broke a rule; the message says which, with the name escaped."""


def checked_name(name: str) -> str:
    """`name` when it is a plain, visible, short file name; UploadRefused otherwise."""
    shown = repr(name[:60])
    if not name or len(name) > MAX_UPLOAD_NAME_CHARS:
        raise UploadRefused(f"{shown}: a file name needs 1 to {MAX_UPLOAD_NAME_CHARS} characters (MAX_UPLOAD_NAME_CHARS)")
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:  # what a file system takes, not characters
        raise UploadRefused(f"{shown}: a file name needs at most {MAX_NAME_BYTES} bytes in UTF-8 (MAX_NAME_BYTES)")
    if not _PLAIN_NAME.match(name) or name.startswith(".") or name != name.strip():
        raise UploadRefused(f"{shown}: not a plain file name (no folder, control character, leading dot or space)")
    try:
        safe_relative_path(name)
    except UnsafePath as exc:
        raise UploadRefused(str(exc)) from None
    return name


async def read_uploads(form: FormData) -> dict[str, bytes]:
    """The form's files as {workspace path: content}, every rule checked."""
    uploads = [value for value in form.getlist("files") if isinstance(value, UploadFile)]
    if len(uploads) > MAX_UPLOAD_FILES:
        raise UploadRefused(f"{len(uploads)} files: at most {MAX_UPLOAD_FILES} (MAX_UPLOAD_FILES)")
    files: dict[str, bytes] = {}
    total = 0
    for upload in uploads:
        name = checked_name(upload.filename or "")
        path = f"{UPLOAD_FOLDER}/{name}"
        if path in files:
            raise UploadRefused(f"{name!r} is uploaded twice")
        data = await upload.read(MAX_UPLOAD_BYTES + 1)
        if len(data) > MAX_UPLOAD_BYTES:
            raise UploadRefused(f"{name!r} is over {MAX_UPLOAD_BYTES} bytes (MAX_UPLOAD_BYTES)")
        total += len(data)
        if total > MAX_UPLOAD_TOTAL_BYTES:
            raise UploadRefused(f"the files come to over {MAX_UPLOAD_TOTAL_BYTES} bytes (MAX_UPLOAD_TOTAL_BYTES)")
        files[path] = data
    return files
