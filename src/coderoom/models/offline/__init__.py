"""The offline analyst: a deterministic `Model` that analyses time-series CSVs through the sandbox."""

from .model import MODEL_NAME, OfflineAnalyst

__all__ = ["MODEL_NAME", "OfflineAnalyst"]
