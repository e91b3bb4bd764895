"""What the user asked for, read from the prompt text: output paths, data files, whether anomalies.

The offline analyst has no language model, so it only acts on what it can find literally: paths
under `output/` are the files to produce (their extension says what goes in them), paths ending in
a data extension are candidate inputs, and a few words mark an anomaly-detection request.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_OUTPUT = re.compile(r"(?<![\w./-])(?:/workspace/|\./)?(output/[\w./-]*[\w])")
_DATA = re.compile(r"(?<![\w./-])(?:/workspace/|\./)?([\w][\w./-]*\.(?:csv|tsv|txt))\b", re.IGNORECASE)
_ANOMALY = re.compile(
    r"\b(anomal\w*|abnormal\w*|outliers?|unusual|irregular\w*|spikes?|faults?|deviations?)\b", re.IGNORECASE
)


@dataclass(frozen=True)
class Request:
    text: str
    outputs: tuple[str, ...]
    inputs: tuple[str, ...]
    wants_anomalies: bool


def _unique(items: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def parse_request(text: str, instructions: str = "") -> Request:
    """Outputs in order of mention, without duplicates; `..` paths are ignored (never written).

    Output paths are also taken from the system instructions (a runner may list required files
    there); what is asked for and which data to use come from the user's text only.
    """
    outputs = [
        m for m in _OUTPUT.findall(text + "\n" + instructions)
        if ".." not in m.split("/") and "." in m.rsplit("/", 1)[-1]
    ]
    inputs = [m for m in _DATA.findall(text) if not m.startswith("output/")]
    return Request(
        text=text,
        outputs=_unique(outputs),
        inputs=_unique(inputs),
        wants_anomalies=bool(_ANOMALY.search(text)),
    )
