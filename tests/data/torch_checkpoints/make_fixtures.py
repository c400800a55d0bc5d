"""Writes the converter's torch-free fixtures: small PyTorch twins saved by torch itself (half in
the zip format, half in the legacy format), with their logits on fixed images.

    pip install torch==2.13.0   # CPU build
    PYTHONPATH=. python tests/data/torch_checkpoints/make_fixtures.py

tests/models/test_torch_conversion.py converts every checkpoint listed in fixtures.json without
torch and compares the converted model's logits with the recorded ones. Seeded: the same torch release writes the
same tensors.
"""
import json
import os

import numpy as np
import torch

from tests import torch_twins

HERE = os.path.dirname(os.path.abspath(__file__))
# name: (twin factory, input side, zoo builder options, legacy serialisation)
FIXTURES = {
    "resnet18": (lambda: torch_twins.TorchvisionResNet(10, False, (2, 2, 2, 2), width=4), 32,
                 {"width": 4}, False),
    "resnet50": (lambda: torch_twins.TorchvisionResNet(10, True, (3, 4, 6, 3), width=4), 32,
                 {"width": 4}, True),
    "vgg16_bn": (lambda: torch_twins.TorchvisionVGG(10, 16, width=4, hidden=16,
                                                    batch_norm=True), 32,
                 {"width": 4, "hidden": 16}, False),
    "vgg11": (lambda: torch_twins.TorchvisionVGG(10, 11, width=4, hidden=16), 32,
              {"width": 4, "hidden": 16}, True),
    "fixup_resnet50": (lambda: torch_twins.FixupResNet50(10, bias_free=False, width=4), 32,
                       {"width": 4}, False),
    "bagnet33": (lambda: torch_twins.BagNet33(10, width=4), 48, {"width": 4}, True),
    "bcos_resnet50": (lambda: torch_twins.BcosResNet50(10, width=4), 32, {"width": 4}, False),
    "vit_base_patch16_224": (lambda: torch_twins.TimmViT(10, 32, patch=8, dim=32, depth=2,
                                                         heads=2), 32,
                             {"patch": 8, "dim": 32, "depth": 2, "heads": 2}, True),
}


def main() -> None:
    expected = {}
    for index, (name, (make, side, _, legacy)) in enumerate(sorted(FIXTURES.items())):
        torch.manual_seed(index)
        model = make().eval()
        torch_twins.randomise_statistics(model)
        images = np.random.default_rng(index).normal(size=(2, side, side, 3)).astype(np.float32)
        if isinstance(model, torch_twins.BcosResNet50):
            images = np.abs(images) / 3  # B-cos reads [0, 1] pixels
            torch_twins.align_classifier(model, images)
        state = {f"module.model.{k}": v for k, v in model.state_dict().items()}  # as IDSDS
        torch.save({"state_dict": state}, os.path.join(HERE, f"{name}.pth"),
                   _use_new_zipfile_serialization=not legacy)
        expected[f"{name}/images"] = images
        expected[f"{name}/logits"] = torch_twins.reference_logits(model, images)
    np.savez(os.path.join(HERE, "expected.npz"), **expected)
    table = {name: {"side": side, "options": options, "format": "legacy" if legacy else "zip"}
             for name, (_, side, options, legacy) in sorted(FIXTURES.items())}
    with open(os.path.join(HERE, "fixtures.json"), "w", encoding="utf-8") as handle:
        json.dump(table, handle, indent=1)
    print(f"wrote {len(FIXTURES)} checkpoints, expected.npz and fixtures.json to {HERE}")


if __name__ == "__main__":
    main()
