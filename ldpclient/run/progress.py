"""The pipeline's ``progress(stage, done, total, metrics)`` calls shown as the UI's progress bars."""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Mapping

from . import ui as terminal
from .ui import UI

if TYPE_CHECKING:
    from ..teachers.client import QueryClient


class StageProgress:
    """Adapter from the pipeline's ``progress(stage, done, total, metrics)`` to the UI's bars."""

    NAMES = {
        "release": "noising",
        "label": "querying",
        "warmup": "warming up",
        "train": "training",
        "adapt": "adapting",
        "predict": "labelling",
    }

    @classmethod
    def stage_name(cls, stage: str) -> str:
        """The name a person reads for a pipeline stage (``adapt`` -> ``adapting``); a part of a stage keeps its
        stage's name before its own (``adapt_predict`` -> ``adapting_predict``)."""
        head, _, part = stage.partition("_")
        if stage not in cls.NAMES and part and head in cls.NAMES:
            return f"{cls.NAMES[head]}_{part}"
        return cls.NAMES.get(stage, stage)

    def __init__(self, ui: UI, prefix: str, client: QueryClient) -> None:
        self.ui = ui
        self.prefix = prefix
        self.client = client
        self._bars: dict[str, terminal.StageProgress] = {}
        self._contexts: list[AbstractContextManager[terminal.StageProgress]] = []
        self._t0: dict[str, float] = {}
        self._epoch_info = ""
        self._label_start: float | None = None

    def _bar(self, stage: str, total: int) -> terminal.StageProgress:
        if stage not in self._bars:
            cm = self.ui.stage(f"{self.prefix}{self.NAMES[stage]}", total)
            self._contexts.append(cm)
            self._bars[stage] = cm.__enter__()
            self._t0[stage] = time.perf_counter()
        return self._bars[stage]

    def __call__(self, stage: str, done: int, total: int, metrics: Mapping[str, float]) -> None:
        if stage == "epoch":
            val = metrics.get("val_acc")
            val_s = "" if val is None or val != val else f" val acc {100 * val:.1f}%"
            self._epoch_info = (
                f"epoch {done}/{total} loss {metrics.get('loss', float('nan')):.3f} "
                f"train acc {100 * metrics.get('train_acc', float('nan')):.1f}%{val_s}"
            )
            if "train" in self._bars:
                self._bars["train"].update(info=self._epoch_info)
            return
        if stage not in self.NAMES:
            return
        if stage == "release" and done >= total:
            self._label_start = time.perf_counter()  # querying starts right after the releases
        bar = self._bar(stage, total)
        info = None
        if stage == "label":
            s = self.client.stats
            elapsed = max(time.perf_counter() - (self._label_start or self._t0[stage]), 1e-3)
            qps = s.queries_sent / elapsed
            info = (
                f"{qps:.0f} q/s, {s.queries_from_journal} from journal, "
                f"spent {self.client.cost.spent_run:.4g} (total {self.client.cost.spent_total:.4g})"
            )
        elif stage == "train":
            info = f"epoch {metrics.get('epoch', '?')} loss {metrics.get('loss', float('nan')):.3f}"
            if self._epoch_info:
                info += f" | last: {self._epoch_info}"
        bar.update(done, total=total, info=info)

    def close(self) -> None:
        while self._contexts:
            self._contexts.pop().__exit__(None, None, None)
