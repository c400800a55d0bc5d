"""PyTorch state dicts of every converted family give the PyTorch model's logits within 1e-4
(randomly initialised torchvision models, BatchNorm statistics randomised; Fixup and bias-free
ResNet-50, BagNet-33 and B-cos ResNet-50 against PyTorch twins written after their releases
layouts; ViT-B/16 from timm). Skipped without torch (and the ViT without timm)."""
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


class _BagNetBottleneck(torch.nn.Module):
    def __init__(self, inplanes, planes, stride, kernel):
        super().__init__()
        nn = torch.nn
        self.conv1, self.bn1 = nn.Conv2d(inplanes, planes, 1, bias=False), nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel, stride, 0, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.downsample = (nn.Sequential(nn.Conv2d(inplanes, planes * 4, 1, stride, bias=False),
                                         nn.BatchNorm2d(planes * 4))
                           if stride != 1 or inplanes != planes * 4 else None)

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = torch.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        residual = x if self.downsample is None else self.downsample(x)
        excess = residual.size(-1) - out.size(-1)
        if excess:
            residual = residual[:, :, :-excess, :-excess]
        return torch.relu(out + residual)


class _BagNet33(torch.nn.Module):
    """BagNet-33 after the PyTorch release (kernel-3 convolution in each stage's first block)."""

    def __init__(self, num_classes):
        super().__init__()
        nn = torch.nn
        self.conv1 = nn.Conv2d(3, 64, 1, bias=False)
        self.conv2 = nn.Conv2d(64, 64, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        inplanes = 64
        for index, (planes, blocks, stride) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3),
                                                             (2, 2, 2, 1))):
            stage = []
            for block in range(blocks):
                stage.append(_BagNetBottleneck(inplanes, planes, stride if block == 0 else 1,
                                               3 if block == 0 else 1))
                inplanes = planes * 4
            setattr(self, f"layer{index + 1}", nn.Sequential(*stage))
        self.fc = nn.Linear(2048, num_classes)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv2(self.conv1(x))))
        for index in range(1, 5):
            x = getattr(self, f"layer{index}")(x)
        return self.fc(x.mean(dim=(2, 3)))


class _BcosConv(torch.nn.Conv2d):
    def forward(self, x):
        weight = torch.nn.functional.normalize(self.weight, dim=(1, 2, 3))
        out = self._conv_forward(x, weight, None)
        norms = torch.nn.functional.avg_pool2d((x ** 2).sum(1, keepdim=True), self.kernel_size,
                                               padding=self.padding, stride=self.stride,
                                               divisor_override=1)
        return (out / (norms + 1e-6).sqrt()).abs() * out


class _UncenteredBN(torch.nn.BatchNorm2d):
    def __init__(self, channels):
        super().__init__(channels)
        self.bias = None

    def forward(self, x):
        return x * (self.running_var + self.eps).rsqrt()[None, :, None, None] \
            * self.weight[None, :, None, None]


class _BcosBottleneck(torch.nn.Module):
    def __init__(self, inplanes, planes, stride):
        super().__init__()
        self.conv1, self.bn1 = _BcosConv(inplanes, planes, 1, bias=False), _UncenteredBN(planes)
        self.conv2 = _BcosConv(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = _UncenteredBN(planes)
        self.conv3 = _BcosConv(planes, planes * 4, 1, bias=False)
        self.bn3 = _UncenteredBN(planes * 4)
        self.downsample = (torch.nn.Sequential(_BcosConv(inplanes, planes * 4, 1, stride,
                                                         bias=False),
                                               _UncenteredBN(planes * 4))
                           if stride != 1 or inplanes != planes * 4 else None)

    def forward(self, x):
        out = self.bn3(self.conv3(self.bn2(self.conv2(self.bn1(self.conv1(x))))))
        return out + (x if self.downsample is None else self.downsample(x))


class _BcosResNet50(torch.nn.Module):
    """B-cos v2 ResNet-50 (B = 2): takes the 6-channel [x, 1 - x] input, as B-cos does."""

    def __init__(self, num_classes):
        super().__init__()
        self.conv1 = _BcosConv(6, 64, 7, 2, 3, bias=False)
        self.bn1 = _UncenteredBN(64)
        inplanes = 64
        for index, (planes, blocks) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3))):
            stage = []
            for block in range(blocks):
                stage.append(_BcosBottleneck(inplanes, planes, 2 if index and not block else 1))
                inplanes = planes * 4
            setattr(self, f"layer{index + 1}", torch.nn.Sequential(*stage))
        self.fc = _BcosConv(2048, num_classes, 1, bias=False)
        self.logit_bias = float(np.log(1 / (num_classes - 1)))

    def forward(self, x):
        x = torch.nn.functional.avg_pool2d(self.bn1(self.conv1(torch.cat([x, 1 - x], 1))), 3, 2,
                                           1)
        for index in range(1, 5):
            x = getattr(self, f"layer{index}")(x)
        return self.fc(x).mean(dim=(2, 3)) + self.logit_bias


def _align_classifier(model, images):
    """B-cos classifier rows near the mean feature: random rows give |cos| ~ 1/45 and logits
    within 1e-3 of the bias, a vacuous comparison."""
    with torch.no_grad():
        x = torch.from_numpy(images.transpose(0, 3, 1, 2))
        x = torch.nn.functional.avg_pool2d(model.bn1(model.conv1(torch.cat([x, 1 - x], 1))), 3,
                                           2, 1)
        for index in range(1, 5):
            x = getattr(model, f"layer{index}")(x)
        mean = x.mean(dim=(0, 2, 3))
        rows = mean[None] + 0.3 * mean.abs().mean() * torch.randn(model.fc.weight.shape[0],
                                                                  mean.numel())
        model.fc.weight.copy_(rows[:, :, None, None])


def _timm_vit():
    timm = pytest.importorskip("timm")
    return timm.models.vision_transformer.VisionTransformer(
        img_size=224, patch_size=16, embed_dim=768, depth=12, num_heads=12, num_classes=10)


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
    "bagnet33": (lambda: _BagNet33(10), 64),
    "bcos_resnet50": (lambda: _BcosResNet50(10), 64),
    "vit_base_patch16_224": (_timm_vit, 224),
}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_converted_checkpoint_gives_the_pytorch_logits(name, tmp_path):
    make, side = FAMILIES[name]
    torch.manual_seed(0)
    reference = make().eval()
    with torch.no_grad():
        for module in reference.modules():
            if isinstance(module, _UncenteredBN):  # gains ~4: B-cos logits far from the bias
                module.running_var.uniform_(0.9, 1.1)
                module.weight.uniform_(3.8, 4.2)
            elif isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 2.0)
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.2, 0.2)
    images = np.random.default_rng(1).normal(size=(3, side, side, 3)).astype(np.float32)
    if isinstance(reference, _BcosResNet50):
        images = np.abs(images) / 3  # B-cos reads [0, 1] pixels
        _align_classifier(reference, images)
    checkpoint = str(tmp_path / f"{name}.pth.tar")  # as IDSDS saves: prefixed, under state_dict
    torch.save({"state_dict": {f"module.model.{k}": v for k, v in
                               reference.state_dict().items()}}, checkpoint)
    with torch.no_grad():
        expected = reference(torch.from_numpy(images.transpose(0, 3, 1, 2))).numpy()
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
