"""A live session's conversation: what the model sees of earlier asks, bounded.

The SDK's `RunResult.to_input_list()` is the whole conversation so far (earlier asks, tool calls,
results, replies); the next ask sends it back with the new request. It would grow without end,
so whole earlier asks are dropped, oldest first, past MAX_HISTORY_ITEMS items or
MAX_HISTORY_CHARS characters (the last ask always stays; within one request, `models.context`
still trims old tool outputs to fit the model's context window).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

MAX_HISTORY_ITEMS = 2000
MAX_HISTORY_CHARS = 4_000_000


def _chars(item: Any) -> int:
    return len(json.dumps(item, default=str))


class History:
    def __init__(self, max_items: int = MAX_HISTORY_ITEMS, max_chars: int = MAX_HISTORY_CHARS) -> None:
        self.max_items = max_items
        self.max_chars = max_chars
        self.items: list[Any] = []
        self._starts: list[int] = []  # where each kept ask begins in `items`

    def next_input(self, request: str) -> list[Any]:
        return [*self.items, {"role": "user", "content": request}]

    def update(self, items: Sequence[Any]) -> int:
        """Keep `items` (the previous history plus one ask) as the history; the number dropped."""
        self._starts.append(len(self.items))
        self.items = list(items)
        dropped = 0
        sizes = [_chars(item) for item in self.items]
        while len(self._starts) > 1 and (len(self.items) > self.max_items or sum(sizes) > self.max_chars):
            cut = self._starts[1]
            self.items, sizes = self.items[cut:], sizes[cut:]
            self._starts = [start - cut for start in self._starts[1:]]
            dropped += cut
        return dropped
