"""Shared fixtures: a tiny synthetic BAM world and a tiny real-format BAM build
(fabricated MSCOCO + MiniPlaces), each built once per session."""
import contextlib
import gc
import hashlib
import json
import os
import shutil
import sys
import tempfile

import pytest

import models
from models.foundation import cli

cli.start_process()  # as in every binary: oneDNN on, TensorFlow's start-up quiet

_SESSION_CACHE = tempfile.mkdtemp(prefix="attribution-benchmarks-tests-")
# hypothesis keeps its own files (examples, character tables) in the session's cache too, not
# in the checkout (its default, ./.hypothesis)
os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = os.path.join(_SESSION_CACHE, "hypothesis")


def pytest_configure(config):
    """One temporary project cache per session (XDG_CACHE_HOME, inherited by every binary and
    notebook kernel the tests start): the suite never reads or writes the user's cache."""
    os.environ["XDG_CACHE_HOME"] = _SESSION_CACHE
    # The workers take the test files in the order `pytest_collection_modifyitems` gives, the
    # longest first, not xdist's default of the files with the most tests first.
    if getattr(config.option, "loadscopereorder", False):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(session, config, items):
    """The test files in descending order of their seconds in a whole run (tests/durations.json,
    written by scripts/suite_durations.py; a file not in it counts as none), each file's tests in
    their own order: with `--dist loadfile` each of the two workers takes the next file when it
    is free, and the longest first keeps a long file from ending the run on one worker alone."""
    with open(os.path.join(os.path.dirname(__file__), "durations.json"), encoding="utf-8") as f:
        seconds = json.load(f)["seconds"]

    def file_of(item):
        return item.nodeid.split("::")[0]

    order = {}
    for item in items:
        order.setdefault(file_of(item), len(order))
    items.sort(key=lambda item: (-seconds.get(file_of(item), 0.0), order[file_of(item)]))


@pytest.fixture(scope="session", autouse=True)
def _temporary_files_in_the_session(tmp_path_factory):
    """Temporary files of the code under test (TensorFlow's autograph modules, about 800 a
    suite; Beam's job-server folders; those of the binaries, notebook kernels and cluster
    processes it starts: TMPDIR) go to the session's cache, removed at the end, not into the
    system's temporary folder. pytest's own base folder is settled first, where it always is."""
    tmp_path_factory.getbasetemp()
    folder = os.path.join(_SESSION_CACHE, "tmp")
    os.makedirs(folder, exist_ok=True)
    tempfile.tempdir = folder
    os.environ["TMPDIR"] = folder


_SESSIONS = []


def pytest_sessionstart(session):
    _SESSIONS.append(session)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After each test file: one garbage collection, then `gc.freeze()`, so that Python's
    automatic full collections no longer walk the millions of objects (TensorFlow graphs,
    models, session fixtures) the earlier files left alive. Measured on the whole suite: 25
    full collections of about 2 s each in one worker, 76 s of the two workers' time."""
    yield
    if nextitem is None or nextitem.path != item.path:
        gc.collect()
        gc.freeze()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """Removes the session's cache, then ends the process without CPython's finalisation. By
    the end of the suite the process holds about 11 GB of TensorFlow graphs, models and
    runtime threads (tf.distribute's servers among them); tearing that down took 1-2 minutes
    here and once crashed CI with a segmentation fault (exit 139) after every test had passed.
    The verdict is printed by then, so it is handed over as the exit status directly. A
    pytest-xdist worker ends the same way: its results went to the main process in its
    session's last message (written to the pipe before this hook), and the main process
    otherwise waited for each worker's teardown, then killed it after 10 s (about 20 s of the
    suite's end)."""
    shutil.rmtree(_SESSION_CACHE, ignore_errors=True)
    if _SESSIONS:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(int(_SESSIONS[-1].exitstatus))


# A world small enough to build in seconds, large enough for every folder to be populated.
TINY_WORLD = {"seed": 3, "image_size": 64, "train_per_pair": 2, "val_per_pair": 3}


def interrupt_at(epoch, step):
    """A Keras callback that raises KeyboardInterrupt after batch `step` of epoch `epoch` (a job
    killed inside an epoch, after the backup of the epochs before it)."""
    import keras

    class Interrupt(keras.callbacks.Callback):
        def on_epoch_begin(self, current, logs=None):
            self.epoch = current

        def on_train_batch_end(self, batch, logs=None):
            if self.epoch == epoch and batch == step:
                raise KeyboardInterrupt

    return Interrupt()


class WritesMarker:
    """Unpickling this calls os.system, which would create the marker file."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def assert_origin_covers_the_flags(config_class, origin):
    """Every flag of `config_class` is in the `origin`'s settings under its name (declared
    origin=True) or under the key it declares (settings or inputs), unless declared as not
    changing results: a new flag cannot be left out of the origin by accident."""
    import dataclasses

    settings = {**origin["settings"], **origin.get("inputs", {})}
    missing = []
    for field in dataclasses.fields(config_class):
        declared = field.metadata.get("origin", True)
        keys = (field.name,) if declared is True else (
            declared if isinstance(declared, tuple) else (declared,))
        if declared is not False and not any(key in settings for key in keys):
            missing.append(f"--{field.name} (origin key {' or '.join(keys)})")
    assert not missing, f"flags missing from the origin: {missing}"


def tree_digests(root):
    """{relative path: sha256} of every file under `root` (byte-identity checks)."""
    result = {}
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as handle:
                result[os.path.relpath(path, root)] = hashlib.sha256(handle.read()).hexdigest()
    return result


@pytest.fixture
def resolutions(monkeypatch):
    """The method names `saliency_gen.attribution.names.resolved` is asked to resolve during the
    test, in order (an already resolved method given back is not counted)."""
    from saliency_gen.attribution import names

    resolving, asked = names.resolved, []

    def counted(method, **params):
        if isinstance(method, str):
            asked.append(method)
        return resolving(method, **params)

    monkeypatch.setattr(names, "resolved", counted)
    return asked


def built_once(tmp_path_factory, name, build):
    """`build(folder)` once per test run, also when pytest-xdist runs the tests in several
    worker processes: they share the run's temporary folder and take turns on its build lock
    (`files.build_lock`, as the project's cache), and the later ones read the first one's (JSON)
    result. Tuples come back as lists."""
    import json
    import pathlib

    from models.foundation import files

    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / f"shared_{name}"
    with files.build_lock(root, f"the fixture {name}", log=lambda line: None):
        done = pathlib.Path(root) / "fixture.json"
        if done.exists():
            return json.loads(done.read_text())
        root.mkdir(exist_ok=True)
        result = build(root)
        done.write_text(json.dumps(result))
        return json.loads(done.read_text())


@contextlib.contextmanager
def _cache_home(folder):
    """XDG_CACHE_HOME set to `folder` inside the block (a build shared by the workers)."""
    saved = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = folder
    try:
        yield
    finally:
        if saved is None:
            del os.environ["XDG_CACHE_HOME"]
        else:
            os.environ["XDG_CACHE_HOME"] = saved


@pytest.fixture(scope="session")
def tiny_world(tmp_path_factory):
    from saliency_gen.data.world import synthetic

    def build(folder):
        root = str(folder / "bam")
        return root, synthetic.build_world(root, **TINY_WORLD)

    return built_once(tmp_path_factory, "tiny_world", build)


@pytest.fixture(scope="session")
def trained_world(tmp_path_factory):
    """(data_dir, model_dir, reports): the default synthetic world in the session's cache with
    its obj, scene and scene_only models and delta patch, as the main job uses them: shipped
    with the package, so nothing is trained (saliency_gen.data.world.shipped). Built once per run
    and hard-linked into each worker's cache (every cache file is written under a temporary
    name and renamed, so no worker changes another's copy)."""
    from bam import synthetic_setup
    from models.foundation.files import project_cache_dir, read_json

    def build(folder):
        with _cache_home(str(folder)):
            synthetic_setup.prepare(log=lambda *_: None)
            return project_cache_dir("synthetic_seed0")

    built = built_once(tmp_path_factory, "trained_world", build)
    own = project_cache_dir("synthetic_seed0")
    if not os.path.isdir(own):
        shutil.copytree(built, own, copy_function=os.link)
    data_dir, model_dir = synthetic_setup.prepare(log=lambda *_: None)
    reports = {name: read_json(os.path.join(model_dir, f"{name}.json"))
               for name in synthetic_setup.MODELS}
    return data_dir, model_dir, reports


@pytest.fixture(scope="session")
def real_sources(tmp_path_factory):
    """(coco_dir, miniplaces_dir, COCO content) fabricated in the real formats."""
    from tests import fabricated

    root = tmp_path_factory.mktemp("sources")
    content = fabricated.fabricate_coco(str(root / "coco"))
    fabricated.fabricate_miniplaces(str(root / "miniplaces"))
    return str(root / "coco"), str(root / "miniplaces"), content


@pytest.fixture(scope="session")
def real_bam(real_sources, tmp_path_factory):
    """(data_dir, info) of the real BAM build on the fabricated sources, seed 0."""
    from bam import coco_miniplaces
    from tests import fabricated

    coco_dir, miniplaces_dir, _ = real_sources
    output = str(tmp_path_factory.mktemp("bam") / "data")
    info = coco_miniplaces.build_dataset(coco_dir, miniplaces_dir, output, seed=0,
                                         images_per_class=fabricated.N,
                                         val_per_class=fabricated.V)
    return output, info


@pytest.fixture(scope="session")
def small_shards(tmp_path_factory):
    """(records pattern, model path): 3 shards of 13, 12 and 11 random 32-px PNG images with
    labels 0..9 (keys in the files' names), and an exported small_cnn (width 4, seed 0) for them:
    the input of the scale-out tests."""
    import io

    import keras
    import numpy as np
    from PIL import Image

    from saliency_gen.data import records

    root = tmp_path_factory.mktemp("small_shards")
    rng = np.random.RandomState(7)
    for shard, count in enumerate((13, 12, 11)):
        examples = []
        for index in range(count):
            buffer = io.BytesIO()
            Image.fromarray(rng.randint(0, 256, (32, 32, 3), np.uint8)).save(buffer, "PNG")
            examples.append(records.image_example(
                buffer.getvalue(), int(rng.randint(10)), filename=f"s{shard}_{index:02d}.png"))
        records.write_records(str(root / f"validation-{shard:05d}-of-00003.tfrecord"), examples)
    keras.utils.set_random_seed(0)
    model_path = str(root / "model")
    models.export(models.build("small_cnn", 10, (32, 32, 3), width=4), model_path)
    return str(root / "validation-*"), model_path


@pytest.fixture(scope="session")
def real_cache(tmp_path_factory):
    """A project cache root (for XDG_CACHE_HOME) holding the pretrained EfficientNet-Lite0,
    converted once per session: tests of the real network never touch the user's cache."""
    from models.formats import pretrained
    from models.foundation.files import project_cache_dir

    def build(folder):
        with _cache_home(str(folder)):
            pretrained.export_path("efficientnet_lite0", project_cache_dir("converted"))
        return str(folder)

    return built_once(tmp_path_factory, "real_cache", build)


@pytest.fixture(scope="session")
def lite0_export(real_cache):
    """The export of the pretrained EfficientNet-Lite0 in the session's cache."""
    from models.formats import pretrained

    return pretrained.export_path("efficientnet_lite0", os.path.join(
        real_cache, "attribution-benchmarks", "converted"))


@pytest.fixture(scope="session")
def photo_pattern(tmp_path_factory):
    """The 20 ImageNet photos as one shard of image records."""
    from saliency_gen.data.sources import photos

    return photos.write_photo_records(str(tmp_path_factory.mktemp("photos")), "imagenet")
