"""Architecture-specific explainers as method units: bcos, bagnet, rollout, chefer_lrp
(docs/saliency.md, "Native explainers"; IDSDS names idsds:Bcos, idsds:BagNet, idsds:Rollout,
idsds:CheferLRP).

Each asks the model for its own explanation (`models.architectures.native_explainers`, through the
adapter's `native` view): a model that does not offer it stops the run with one line naming what it
offers. The one-channel map is spread evenly over the image's channels, so the channel sum IDSDS
takes is the map itself (a B-cos map still sums to the logit minus its bias).
"""
from typing import Any

from saliency_gen.attribution.units import Context, Method, Plan, register, tile_channels


class _Native(Method):
    """A unit computing the model's native explanation `native_name`."""

    native_name = ""
    views = ("native",)

    def plan(self, options: dict, context: Context) -> Any:
        channels = context.shape[2]
        model, name = context.model, self.native_name
        model.require_native(name)

        def share(items):
            return tile_channels(model.native(name, items.x, items.targets), channels) / channels

        return Plan(1, share)


@register
class Bcos(_Native):
    name = "bcos"
    native_name = "Bcos"
    summary = "B-cos contribution map W(x) x (B-cos models only)"


@register
class BagNetEvidence(_Native):
    name = "bagnet"
    native_name = "BagNet"
    summary = "per-patch class evidence of a BagNet (BagNet models only)"


@register
class Rollout(_Native):
    name = "rollout"
    native_name = "Rollout"
    summary = "attention rollout from the second block (ViT models only)"


@register
class CheferLrp(_Native):
    name = "chefer_lrp"
    native_name = "CheferLRP"
    summary = "Chefer et al.'s transformer attribution (ViT models only)"
