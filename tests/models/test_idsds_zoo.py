"""The IDSDS model zoo: full-size architectures have torchvision's parameter counts, and PyTorch
state dicts convert to the same logits (torch optional; skipped cleanly without it)."""
import numpy as np
import pytest

import models
from models.formats import torch_checkpoints
from models.foundation.errors import UserError

# torchvision's parameter counts (sum of p.numel() over model.parameters(), 1000 classes);
# Fixup ResNet-50 = ResNet-50 - 53,120 BatchNorm parameters + 114 Fixup scalars; without bias
# also drops the classifier's 1,000 biases; VGG-16 without bias drops 13,416 biases.
PARAMETERS = {
    "resnet18": 11_689_512, "resnet34": 21_797_672, "resnet50_tv": 25_557_032,
    "resnet101": 44_549_160, "resnet152": 60_192_808, "wide_resnet50_2": 68_883_240,
    "fixup_resnet50": 25_504_026, "x_resnet50": 25_502_912,
    "vgg11": 132_863_336, "vgg13": 133_047_848, "vgg16_tv": 138_357_544,
    "vgg19": 143_667_240, "vgg16_bn": 138_365_992, "x_vgg16": 138_344_128,
}


@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_full_size_models_have_the_reference_parameter_count(name):
    # Counts do not depend on the input side (global / adaptive pooling): build at 32 px.
    model = models.build(name, 1000, (32, 32, 3))
    trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    assert trainable == PARAMETERS[name]
    assert models.feature_layer_name(model) == models.FEATURE_LAYER


def test_a_checkpoint_for_another_model_is_a_one_line_error(tmp_path):
    torch = pytest.importorskip("torch")
    path = str(tmp_path / "wrong.pth")
    torch.save({"fc.weight": torch.zeros(10, 512), "fc.bias": torch.zeros(10)}, path)
    with pytest.raises(UserError, match="does not match the model resnet18: no tensor for conv1"):
        torch_checkpoints.convert(path, "resnet18", str(tmp_path / "out"), image_size=32)
