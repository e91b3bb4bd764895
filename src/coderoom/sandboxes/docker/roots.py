"""The system trust roots of a Docker sandbox's image, for its egress bundle.

With a secret on an allowlist, the sandbox trusts the session's CA through a bundle file of
"the system roots plus that CA" (`egress.interception`). On the local backend the sandbox's
/etc/ssl is the host's, so the host's file serves; a container's are its image's, read here from
the container through the engine's archive API. The container's root file system is read-only
(`request.create_request`), so the file is the image's, not something the sandbox wrote; it is
still read with bounds (MAX_SYSTEM_BUNDLE_BYTES) and taken only as one regular file.
"""

from __future__ import annotations

from typing import Any

import docker.errors

from ...egress.interception import MAX_SYSTEM_BUNDLE_BYTES, SYSTEM_BUNDLES
from ...hostile.archive import ArchiveError, one_file


def image_roots(client: Any, container_id: str) -> bytes | None:
    """The first of SYSTEM_BUNDLES the container has, as one regular file within the bound
    (`hostile.archive.one_file`), or None (no such file, a link, too large: the caller keeps
    the host's roots)."""
    for path in SYSTEM_BUNDLES:
        try:
            chunks, _ = client.api.get_archive(container_id, path)
            return one_file(chunks, MAX_SYSTEM_BUNDLE_BYTES)
        except docker.errors.NotFound:
            continue
        except (docker.errors.APIError, OSError, ArchiveError):
            return None
    return None
