"""The built-in method units, one module each (importing this package registers them all).

| Module | Units |
|---|---|
| `gradient` | gradient, grad_x_input |
| `guided_backprop` | guided_backprop |
| `integrated_gradients` | integrated_gradients |
| `cam` | grad_cam, grad_cam_pp, xgrad_cam, layer_cam, guided_grad_cam |
| `smooth_cam` | sg_grad_cam_pp |
| `rise` | rise |
| `occlusion` | occlusion |
| `sobel` | sobel |
| `centre_gaussian` | centre_gaussian |
| `constant` | constant |
| `random` | random |
| `pair` | xrai, blur_ig, guided_ig (bridges to PAIR `saliency.core`) |
| `native` | bcos, bagnet, rollout, chefer_lrp (the model's own explanation, zoo only) |

A new method is one new module here (or anywhere, registered with `saliency_gen.register` or
`saliency_gen.register_method`) plus its test; the engine needs no edit.
"""
# Imported in the order the methods are listed (saliency_gen.METHODS).
from saliency_gen.attribution.methods import gradient  # noqa: I001
from saliency_gen.attribution.methods import integrated_gradients
from saliency_gen.attribution.methods import guided_backprop
from saliency_gen.attribution.methods import cam
from saliency_gen.attribution.methods import smooth_cam
from saliency_gen.attribution.methods import rise
from saliency_gen.attribution.methods import occlusion
from saliency_gen.attribution.methods import sobel
from saliency_gen.attribution.methods import centre_gaussian
from saliency_gen.attribution.methods import constant
from saliency_gen.attribution.methods import random
from saliency_gen.attribution.methods import pair
from saliency_gen.attribution.methods import native

__all__ = ["cam", "centre_gaussian", "constant", "gradient", "guided_backprop",
           "integrated_gradients", "native", "occlusion", "pair", "random", "rise", "smooth_cam",
           "sobel"]
