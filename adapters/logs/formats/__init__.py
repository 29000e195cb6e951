"""The log formats FlowPlan reads, most specific first (the order auto-detection tries them in)."""

from adapters.logs.formats.base import Context, Item, LogFormat
from adapters.logs.formats.hf_trainer import HfTrainer
from adapters.logs.formats.jsonl import JsonLines
from adapters.logs.formats.keras import Keras
from adapters.logs.formats.key_value import KeyValue
from adapters.logs.formats.progress_bar import ProgressBar
from adapters.logs.formats.pytorch_example import PytorchExample

#: Tried in this order on each frame: the first that recognises it reads it.
FORMATS: tuple[type[LogFormat], ...] = (JsonLines, HfTrainer, PytorchExample, Keras, ProgressBar, KeyValue)

__all__ = [
    "FORMATS",
    "Context",
    "HfTrainer",
    "Item",
    "JsonLines",
    "Keras",
    "KeyValue",
    "LogFormat",
    "ProgressBar",
    "PytorchExample",
]
