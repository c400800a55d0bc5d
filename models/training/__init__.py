"""Training: the one loop with exact resume, origins and mixed precision (`loop`), tf.distribute
(`distribution`) and the recipes as data (`recipes`). Imports models.foundation,
models.architectures and models.formats.
"""
from models.foundation import lazy as _lazy

__getattr__ = _lazy.lazy_names(__name__, {})  # submodules on first use
