"""PyTorch state dicts of every converted family give the PyTorch model's logits within 1e-4
(randomly initialised torchvision models, BatchNorm statistics randomised; Fixup and bias-free
ResNet-50 against a PyTorch twin written after the X-DNN layout). Skipped without torch."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

import models  # noqa: E402
from models import torch_checkpoints  # noqa: E402


class _FixupBottleneck(torch.nn.Module):
    def __init__(self, inplanes, planes, stride, bias_free):
        super().__init__()
        self.bias_free = bias_free
        conv = torch.nn.Conv2d
        self.conv1 = conv(inplanes, planes, 1, bias=False)
        self.conv2 = conv(planes, planes, 3, stride, 1, bias=False)
        self.conv3 = conv(planes, planes * 4, 1, bias=False)
        self.downsample = (conv(inplanes, planes * 4, 1, stride, bias=False)
                           if stride != 1 or inplanes != planes * 4 else None)
        if not bias_free:
            for name in ("bias1a", "bias1b", "bias2a", "bias2b", "bias3a", "bias3b"):
                setattr(self, name, torch.nn.Parameter(torch.randn(1) * 0.1))
            self.scale = torch.nn.Parameter(1 + torch.randn(1) * 0.1)

    def forward(self, x):
        b = (lambda name: 0.0) if self.bias_free else (lambda name: getattr(self, name))
        out = torch.relu(self.conv1(x + b("bias1a")) + b("bias1b"))
        out = torch.relu(self.conv2(out + b("bias2a")) + b("bias2b"))
        out = self.conv3(out + b("bias3a"))
        out = out if self.bias_free else out * self.scale + self.bias3b
        identity = x if self.downsample is None else self.downsample(x + b("bias1a"))
        return torch.relu(out + identity)


class _FixupResNet50(torch.nn.Module):
    def __init__(self, num_classes, bias_free):
        super().__init__()
        self.bias_free = bias_free
        self.conv1 = torch.nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        if not bias_free:
            self.bias1 = torch.nn.Parameter(torch.randn(1) * 0.1)
            self.bias2 = torch.nn.Parameter(torch.randn(1) * 0.1)
        inplanes = 64
        for index, (planes, blocks) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3))):
            stage = []
            for block in range(blocks):
                stage.append(_FixupBottleneck(inplanes, planes, 2 if index and not block else 1,
                                              bias_free))
                inplanes = planes * 4
            setattr(self, f"layer{index + 1}", torch.nn.Sequential(*stage))
        self.fc = torch.nn.Linear(2048, num_classes, bias=not bias_free)

    def forward(self, x):
        x = self.conv1(x)
        x = torch.relu(x if self.bias_free else x + self.bias1)
        x = torch.nn.functional.max_pool2d(x, 3, 2, 1)
        for index in range(1, 5):
            x = getattr(self, f"layer{index}")(x)
        x = x.mean(dim=(2, 3))
        return self.fc(x if self.bias_free else x + self.bias2)


def _torchvision(name, bias=True):
    def make():
        model = getattr(torchvision.models, name)(num_classes=10)
        if not bias:
            for module in model.modules():
                if isinstance(module, (torch.nn.Conv2d, torch.nn.Linear)):
                    module.bias = None
        return model
    return make


FAMILIES = {  # zoo (or IDSDS) name: (PyTorch model, input side)
    "resnet18": (_torchvision("resnet18"), 64),
    "resnet50": (_torchvision("resnet50"), 64),
    "wide_resnet50_2": (_torchvision("wide_resnet50_2"), 64),
    "fixup_resnet50": (lambda: _FixupResNet50(10, bias_free=False), 64),
    "x_resnet50": (lambda: _FixupResNet50(10, bias_free=True), 64),
    "vgg11": (_torchvision("vgg11"), 32),
    "vgg16_bn": (_torchvision("vgg16_bn"), 32),
    "x_vgg16": (_torchvision("vgg16", bias=False), 32),
}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_converted_checkpoint_gives_the_pytorch_logits(name, tmp_path):
    make, side = FAMILIES[name]
    torch.manual_seed(0)
    reference = make().eval()
    with torch.no_grad():
        for module in reference.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 2.0)
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.2, 0.2)
    checkpoint = str(tmp_path / f"{name}.pth.tar")  # as IDSDS saves: prefixed, under state_dict
    torch.save({"state_dict": {f"module.model.{k}": v for k, v in
                               reference.state_dict().items()}}, checkpoint)
    images = np.random.default_rng(1).normal(size=(3, side, side, 3)).astype(np.float32)
    with torch.no_grad():
        expected = reference(torch.from_numpy(images.transpose(0, 3, 1, 2))).numpy()
    info = torch_checkpoints.convert(checkpoint, name, str(tmp_path / "export"), image_size=side)
    found = models.load(str(tmp_path / "export"))(images).numpy()
    difference = float(np.abs(found - expected).max())
    print(f"{name}: max |logit difference| {difference:.2e} (logits up to "
          f"{np.abs(expected).max():.2f})")
    assert np.abs(expected).max() > 1e-3  # not a vacuous comparison
    assert difference < 1e-4
    assert info["name"] == torch_checkpoints.zoo_name(name) and info["num_classes"] == 10


def test_evaluate_scores_a_pytorch_checkpoint_directly(small_shards, tmp_path, monkeypatch):
    from faithfulness import evaluate

    pattern, _ = small_shards
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    torch.manual_seed(0)
    checkpoint = str(tmp_path / "resnet18.pth")
    torch.save(torchvision.models.resnet18(num_classes=10).state_dict(), checkpoint)
    config = evaluate.Config(model="resnet18", pretrained_ckpt=checkpoint, input_pattern=pattern,
                             image_size=32, explainer=("idsds:IxG",), nr_images=8,
                             batch_size=8, output=str(tmp_path / "report.json"))
    report = evaluate.run(config)
    assert report["model_id"].startswith("resnet18-") and report["n_images"] == 8
    (summary,) = report["results"]["idsds:IxG"].values()  # the single deletion score
    assert -1 <= summary["mean"] <= 1 and len(summary["per_image"]) == 8
    converted = tmp_path / "cache" / "attribution-benchmarks" / "converted"
    assert len(list(converted.iterdir())) == 1  # converted once, then reused
