"""`view_image` without `apply_patch`: the SDK's Filesystem capability bundles a custom
`apply_patch` tool that Chat Completions servers reject, so coderoom offers the image viewer alone
(the model writes files with the shell or run_python)."""

from __future__ import annotations

from typing import Literal

from agents.sandbox.capabilities import Capability
from agents.sandbox.capabilities.tools import ViewImageTool
from agents.tool import Tool


class ViewImage(Capability):
    type: Literal["view_image"] = "view_image"

    def tools(self) -> list[Tool]:
        if self.session is None:
            raise ValueError("ViewImage capability is not bound to a SandboxSession")
        return [ViewImageTool(session=self.session, user=self.run_as)]
