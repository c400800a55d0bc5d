"""The networks: the zoo's registry and builders (`zoo`) and each family's layers (`layers`,
`resnet_v15`, `torchvision_family`, `bagnet`, `bcos`, `vit`, `efficientnet_lite`), the guided-ReLU
view of a model (`guided`), and the explainers some architectures carry as model endpoints
(`native_explainers`: BagNet evidence, B-cos contributions, attention rollout; `chefer_lrp`).
Imports only models.foundation.
"""
from models.foundation import lazy as _lazy

__getattr__ = _lazy.lazy_names(__name__, {})  # submodules on first use
