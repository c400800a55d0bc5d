"""The report card's engine and pages: cells, intervals, ranks and agreement (`engine`), HTML,
Markdown, JSON and pictures (`pages`), and the statistics behind "how far to trust each metric"
(`uncertainty`, `reliability`, `meta_evaluation`). No TensorFlow; imports only
models.foundation.
"""
from models.foundation import lazy as _lazy

__getattr__ = _lazy.lazy_names(__name__, {})  # submodules on first use
