"""PyTorch checkpoints convert to zoo models that give the PyTorch model's logits.

Without torch (as in CI): the fixtures in tests/data/torch_checkpoints, small twins of every
converted family saved by torch itself in the zip and the legacy format, convert to the logits
torch recorded within 1e-4. With torch and torchvision (an optional cross-check): full-size
torchvision models and PyTorch twins of the Fixup / bias-free ResNet-50, BagNet-33, B-cos
ResNet-50 and timm's ViT-B/16 (randomly initialised, BatchNorm statistics randomised) do too."""
import json
import os

import numpy as np
import pytest

import models
import saliency_gen
from models.architectures import native_explainers
from models.formats import torch_checkpoints
from tests import torch_format
from tests.models import round_trip

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "torch_checkpoints")
with open(os.path.join(FIXTURES, "fixtures.json"), encoding="utf-8") as _handle:
    FIXTURE_TABLE = json.load(_handle)
# The architectures' own explainers, checked on the export here (no second export elsewhere),
# with their relative tolerances: Chefer's relevance ratios amplify float32 summation-order noise
# (batches of 2 against the whole batch), B-cos's contributions do not. The absolute floor is a
# millionth of the largest value (the B-cos fixture's maps reach 66, its logits 7.9e3).
NATIVE = {"bagnet33": ("BagNet", 1e-4), "bcos_resnet50": ("Bcos", 1e-4),
          "vit_b_16": ("CheferLRP", 1e-3)}


@pytest.mark.parametrize("name", sorted(FIXTURE_TABLE))
def test_fixture_checkpoint_converts_to_the_recorded_pytorch_logits(name, tmp_path):
    entry = FIXTURE_TABLE[name]
    with np.load(os.path.join(FIXTURES, "expected.npz"), allow_pickle=False) as expected:
        images, logits = expected[f"{name}/images"], expected[f"{name}/logits"]
    checkpoint = os.path.join(FIXTURES, f"{name}.pth")
    info = torch_checkpoints.convert(checkpoint, name, str(tmp_path / "export"),
                                     image_size=entry["side"], options=entry["options"])
    loaded = models.load(str(tmp_path / "export"))
    found = loaded(images).numpy()
    difference = float(np.abs(found - logits).max())
    scale = float(np.abs(logits).max())
    print(f"{name} ({entry['format']}): max |logit difference| {difference:.2e} (logits up to "
          f"{scale:.1f})")
    assert np.ptp(logits) > 1e-3  # logits that differ: not a vacuous comparison
    # float32 rounding grows with the logits (the small B-cos twin's reach 7.9e3)
    assert difference < 1e-4 + 1e-5 * scale
    assert info["name"] == torch_checkpoints.zoo_name(name) and info["num_classes"] == 10
    # The export round trip of this architecture (the zoo's round-trip test leaves it to this
    # one): the live model with the same tensors gives the same features and input gradients.
    live = models.build(info["name"], 10, (entry["side"],) * 2 + (3,), **entry["options"])
    torch_checkpoints.load_state_dict(live, torch_checkpoints.read_state_dict(checkpoint))
    labels = np.argmax(logits, axis=1)
    round_trip.assert_export_matches(live, loaded, images, labels)
    if info["name"] in NATIVE:  # the model's own explainer answers alike from the export
        explainer, tolerance = NATIVE[info["name"]]
        maps = native_explainers.explain(explainer, live, images, labels).numpy()
        found = saliency_gen.attribute(loaded, images, f"idsds:{explainer}", targets=labels,
                                       batch_size=2)[..., 0]
        assert np.abs(maps).max() > 0
        np.testing.assert_allclose(found, maps, rtol=tolerance, atol=1e-6 * np.abs(maps).max())


def _torch_modules():
    torch = pytest.importorskip("torch")
    torchvision = pytest.importorskip("torchvision")
    from tests import torch_twins
    return torch, torchvision, torch_twins


def _timm_vit():
    timm = pytest.importorskip("timm")
    return timm.models.vision_transformer.VisionTransformer(
        img_size=224, patch_size=16, embed_dim=768, depth=12, num_heads=12, num_classes=10)


def _torchvision(name, bias=True):
    def make():
        torch, torchvision, _ = _torch_modules()
        model = getattr(torchvision.models, name)(num_classes=10)
        if not bias:
            for module in model.modules():
                if isinstance(module, (torch.nn.Conv2d, torch.nn.Linear)):
                    module.bias = None
        return model
    return make


def _twin(name, **options):
    def make():
        return getattr(_torch_modules()[2], name)(10, **options)
    return make


FAMILIES = {  # zoo (or IDSDS) name: (full-size PyTorch model, input side)
    "resnet18": (_torchvision("resnet18"), 64),
    "resnet50": (_torchvision("resnet50"), 64),
    "wide_resnet50_2": (_torchvision("wide_resnet50_2"), 64),
    "fixup_resnet50": (_twin("FixupResNet50", bias_free=False), 64),
    "x_resnet50": (_twin("FixupResNet50", bias_free=True), 64),
    "vgg11": (_torchvision("vgg11"), 32),
    "vgg16_bn": (_torchvision("vgg16_bn"), 32),
    "x_vgg16": (_torchvision("vgg16", bias=False), 32),
    "bagnet33": (_twin("BagNet33"), 64),
    "bcos_resnet50": (_twin("BcosResNet50"), 64),
    "vit_base_patch16_224": (_timm_vit, 224),
}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_full_size_checkpoint_gives_the_pytorch_logits(name, tmp_path):
    torch, _, torch_twins = _torch_modules()
    make, side = FAMILIES[name]
    torch.manual_seed(0)
    reference = make().eval()
    torch_twins.randomise_statistics(reference)
    images = np.random.default_rng(1).normal(size=(3, side, side, 3)).astype(np.float32)
    if isinstance(reference, torch_twins.BcosResNet50):
        images = np.abs(images) / 3  # B-cos reads [0, 1] pixels
        torch_twins.align_classifier(reference, images)
    checkpoint = str(tmp_path / f"{name}.pth.tar")  # as IDSDS saves: prefixed, under state_dict
    torch.save({"state_dict": {f"module.model.{k}": v for k, v in
                               reference.state_dict().items()}}, checkpoint)
    expected = torch_twins.reference_logits(reference, images)
    info = torch_checkpoints.convert(checkpoint, name, str(tmp_path / "export"), image_size=side)
    found = models.load(str(tmp_path / "export"))(images).numpy()
    difference = float(np.abs(found - expected).max())
    print(f"{name}: max |logit difference| {difference:.2e} (logits up to "
          f"{np.abs(expected).max():.2f})")
    assert np.ptp(expected) > 1e-3  # logits that differ: not a vacuous comparison
    assert difference < 1e-4
    assert info["name"] == torch_checkpoints.zoo_name(name) and info["num_classes"] == 10


def test_evaluate_scores_a_pytorch_checkpoint_directly(small_shards, tmp_path, monkeypatch):
    from faithfulness import evaluate

    pattern, _ = small_shards
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    keras_model = models.build("resnet18", 10, (32, 32, 3))  # full size, random weights
    checkpoint = str(tmp_path / "resnet18.pth")
    torch_format.write_checkpoint(checkpoint, torch_format.tensors_of(
        torch_format.keras_state_dict(keras_model)))
    config = evaluate.Config(model="resnet18", pretrained_ckpt=checkpoint, input_pattern=pattern,
                             image_size=32, explainer=("idsds:IxG",), nr_images=8,
                             batch_size=8, output=str(tmp_path / "report.json"))
    report = evaluate.run(config)
    assert report["model_id"].startswith("resnet18-") and report["n_images"] == 8
    (summary,) = report["results"]["idsds:IxG"].values()  # the single deletion score
    assert -1 <= summary["mean"] <= 1 and len(summary["per_image"]) == 8
    converted = tmp_path / "cache" / "attribution-benchmarks" / "converted"
    (export,) = converted.iterdir()  # converted once, then reused
    images = np.random.default_rng(0).normal(size=(2, 32, 32, 3)).astype(np.float32)
    assert np.allclose(models.load(str(export))(images), keras_model(images), atol=1e-4)
