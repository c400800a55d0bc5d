"""Models on disk and their input spaces: the SavedModel export and `LoadedModel` (`exporting`),
loading any supported folder (`loading`), TF1 SavedModels (`tf1_models`), PyTorch checkpoints read
without unpickling code (`torch_pickle`, `object_arrays`, `torch_checkpoints`), the pretrained
network's cache (`pretrained`), a model seen through one interface (`adapter`) and the input
spaces (`preprocessing`). Imports models.foundation and models.architectures.
"""
from models.foundation import lazy as _lazy

__getattr__ = _lazy.lazy_names(__name__, {})  # submodules on first use
