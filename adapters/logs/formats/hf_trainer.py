"""Hugging Face Transformers ``Trainer``: the dicts it prints every ``logging_steps`` and after each evaluation::

    {'loss': '2.249', 'grad_norm': '0.5336', 'learning_rate': '0.004667', 'epoch': '0.2222'}
    {'eval_loss': '1.256', 'eval_accuracy': '0.875', ..., 'epoch': '1'}

(transformers 5 prints the values as strings, 4.x as numbers; both are read.) The Trainer's
``epoch`` is already epochs completed, fractional. A dict may follow a tqdm bar on the same line.
The run's summary (``train_runtime``, ``train_loss``: the mean over the whole run) is no point.
"""

from __future__ import annotations

import ast
from typing import Any

from adapters.logs.formats.base import Context, Item, LogFormat
from adapters.logs.points import finite, number
from adapters.logs.terminal import Frame

MAX_DICT = 4096


def _literal(text: str) -> dict[str, Any] | None:
    start = text.find("{'")
    end = text.rfind("}")
    if start < 0 or end < start or end - start > MAX_DICT:
        return None
    try:
        obj = ast.literal_eval(text[start : end + 1])
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return obj if isinstance(obj, dict) and "epoch" in obj else None


class HfTrainer(LogFormat):
    name = "hf-trainer"
    example = "{'loss': 0.4312, 'grad_norm': 0.71, 'learning_rate': 4.6e-05, 'epoch': 0.5}"

    def read(self, frame: Frame, time: float | None, ctx: Context) -> list[Item] | None:
        d = _literal(frame.text)
        if d is None:
            return None
        epoch = finite(number(d.get("epoch")))
        if epoch is None or epoch < 0 or "train_runtime" in d:
            return []
        metric = next((number(d[k]) for k in ("eval_accuracy", "eval_acc") if k in d), None)
        return self.point(epoch, number(d.get("loss")), metric, time)
