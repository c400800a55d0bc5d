"""The ground floor every other part stands on, none of it TensorFlow at import: flags and
binaries (`cli`), one-line errors (`errors`), atomic files and JSON (`files`), origins and digests
(`provenance`), progress bars (`progress`), result tables (`results`), the one metric shape
(`metric_spec`), names loaded on first use
(`lazy`), and the chunked executor, host-to-tensor copies and retrace control the hot paths
share (`executor`, `transfer`, `tracing`). Imports nothing else of the project.
"""
from models.foundation import lazy as _lazy

__getattr__ = _lazy.lazy_names(__name__, {})  # submodules on first use
