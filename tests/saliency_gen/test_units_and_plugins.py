"""Method units and a researcher's own method: registration, spec strings, wrappers, errors."""
import hashlib
import importlib
import inspect
import os
import sys
import types

import numpy as np
import pytest
import tensorflow as tf

import models
import saliency_gen
from models.foundation import file_digests
from saliency_gen.attribution import code_identity, noise, plugins, units
from tests import REPO
from tests.saliency_gen import linear_model

SHAPE = (8, 8, 3)
USER_METHODS = os.path.join(REPO, "tests", "data", "user_methods")


@pytest.fixture(scope="module")
def linear():
    model, weights = linear_model(SHAPE)
    images = np.random.default_rng(1).normal(0, 1, (4, *SHAPE)).astype(np.float32)
    targets = np.array([0, 1, 2, 1])
    return model, weights[..., targets].transpose(3, 0, 1, 2), images, targets


@pytest.fixture
def on_path(monkeypatch):
    monkeypatch.syspath_prepend(USER_METHODS)


def _blob():
    rows = np.linspace(-1, 1, SHAPE[0], dtype=np.float32)[:, None]
    cols = np.linspace(-1, 1, SHAPE[1], dtype=np.float32)[None, :]
    return np.exp(-(rows ** 2 + cols ** 2) / 0.5)[None, :, :, None]


def _register(name, fn, **options):
    """Registers for one test and removes the name again afterwards."""
    return saliency_gen.register_method(name, fn, replace=True, **options)


@pytest.fixture(autouse=True)
def _forget_user_methods():
    before = set(units.registered())  # the built-ins loaded first
    yield
    for name in set(units.REGISTRY) - before:
        del units.REGISTRY[name]


def test_spec_string_and_registered_function_give_the_known_answer(linear, on_path):
    model, w, images, targets = linear
    expected = w * _blob()
    by_string = saliency_gen.attribute(model, images, "blob_attribution:gradient_times_blob",
                                       targets)
    np.testing.assert_allclose(by_string, expected, rtol=1e-5, atol=1e-6)
    import blob_attribution

    _register("blob", blob_attribution.gradient_times_blob)
    for batch_size in (1, 3, 64):  # the function is traced on chunks of any size
        np.testing.assert_allclose(saliency_gen.attribute(model, images, "blob", targets,
                                                          batch_size=batch_size),
                                   by_string, rtol=1e-6, atol=1e-7)
    assert "blob" in saliency_gen.method_names()
    assert "blob_attribution:gradient_times_blob" in saliency_gen.method_names()


def test_noise_wrappers_compose_around_a_user_method(linear, on_path):
    model, w, images, targets = linear
    name = "blob_attribution:gradient_times_blob"
    options = dict(nsamples=4, seed=2)
    expected = w * _blob()  # a linear model: every noisy sample gives the same map
    np.testing.assert_allclose(saliency_gen.attribute(model, images, f"smoothgrad({name})",
                                                      targets, **options),
                               expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(saliency_gen.attribute(model, images, f"smoothgrad_sq({name})",
                                                      targets, **options),
                               expected ** 2, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(saliency_gen.attribute(model, images, f"vargrad({name})",
                                                      targets, **options), 0, atol=1e-9)


def test_one_channel_maps_parameters_ids_and_seed(linear):
    model, w, images, targets = linear

    def scaled_sum(model, images, targets, scale=2.0, ids=None, seed=None):
        with tf.GradientTape() as tape:
            tape.watch(images)
            score = tf.reduce_sum(tf.gather(model(images), targets, batch_dims=1))
        summed = tf.reduce_sum(tape.gradient(score, images), axis=-1, keepdims=True)
        key = tf.cast(ids, tf.float32)[:, None, None, None] + float(seed)
        return scale * summed + key * 1e-3

    _register("scaled_sum", scaled_sum, params={"scale": 2.0})
    ids = np.array([10, 20, 30, 40])
    maps = saliency_gen.attribute(model, images, "scaled_sum", targets, ids=ids, seed=5)
    assert maps.shape == images.shape  # one channel, repeated over the image's channels
    key = (ids + 5.0)[:, None, None, None] * 1e-3
    expected = 2.0 * w.sum(-1, keepdims=True) + key
    np.testing.assert_allclose(maps, np.broadcast_to(expected, maps.shape), rtol=1e-5)
    tripled = saliency_gen.attribute(model, images, "scaled_sum", targets, ids=ids, seed=5,
                                     scale=3.0)
    expected = 3.0 * w.sum(-1, keepdims=True) + key
    np.testing.assert_allclose(tripled, np.broadcast_to(expected, maps.shape), rtol=1e-5)
    with pytest.raises(models.UserError, match="method scaled_sum has no parameter sigma"):
        saliency_gen.attribute(model, images, "scaled_sum", targets, sigma=1.0)


def test_a_new_multi_item_unit_joins_the_stream_without_engine_edits(linear):
    model, w, images, targets = linear

    class ThirdsOfTheGradient(saliency_gen.Method):
        """Three work items per image, each adding (step + 1) / 6 of the gradient: sum = w."""

        name = "thirds_of_the_gradient"
        params = {"parts": saliency_gen.Param(3, minimum=1)}

        def steps(self, options, shape):
            return int(options["parts"])

        def plan(self, options, context):
            parts = int(options["parts"])
            logits = context.model.logits

            def share(items):
                weight = 2.0 * (tf.cast(items.step, tf.float32) + 1) / (parts * (parts + 1))
                return weight[:, None, None, None] * units.gradient_of(logits, items.x,
                                                                       items.targets)
            return saliency_gen.Plan(parts, share)

    saliency_gen.register(ThirdsOfTheGradient)
    for batch_size in (1, 5, 64):
        np.testing.assert_allclose(saliency_gen.attribute(
            model, images, "thirds_of_the_gradient", targets, batch_size=batch_size), w,
            rtol=1e-5, atol=1e-6)
    squared = saliency_gen.attribute(model, images, "smoothgrad_sq(thirds_of_the_gradient)",
                                     targets, nsamples=3, parts=4, batch_size=7)
    np.testing.assert_allclose(squared, w ** 2, rtol=1e-4, atol=1e-6)
    with pytest.raises(models.UserError, match="parts must be at least 1"):
        saliency_gen.attribute(model, images, "thirds_of_the_gradient", targets, parts=0)


def test_one_item_maps_are_collected_with_the_bits_of_a_sum(linear):
    model, _, images, targets = linear

    def signed_zeros(model, images, targets):
        return tf.where(images > 0, -tf.zeros_like(images), images)

    plan = saliency_gen.Plan(1, lambda items: items.x)
    assert plan.direct and not saliency_gen.Plan(2, lambda items: items.x).direct
    assert not noise.NoisePlan(plan, "smoothgrad", 2, 0, images.shape[1:]).direct
    saliency_gen.register_method("signed_zeros", signed_zeros, replace=True)
    maps = saliency_gen.attribute(model, images, "signed_zeros", targets, batch_size=2)
    np.testing.assert_array_equal(maps, np.where(images > 0, 0.0, images))
    assert (maps == 0).sum() > 10 and not np.signbit(maps[maps == 0]).any()


def test_untraced_functions_run_on_groups(linear):
    model, w, images, targets = linear

    def numpy_gradient_sign(model, images, targets):
        with tf.GradientTape() as tape:
            tape.watch(images)
            score = tf.reduce_sum(tf.gather(model(images), targets, batch_dims=1))
        return np.sign(tape.gradient(score, images).numpy())  # numpy: cannot be traced

    _register("gradient_sign", numpy_gradient_sign, traced=False)
    np.testing.assert_array_equal(saliency_gen.attribute(model, images, "gradient_sign",
                                                         targets), np.sign(w))
    # times the input: the product is written into the engine's own array, never into one a
    # host plan keeps and returns again
    kept = np.full(images.shape, 2.0, np.float32)

    class KeptMaps(saliency_gen.Method):
        name = "kept_maps"

        def plan(self, options, context):
            return units.HostPlan(lambda images, targets, ids: kept)

    saliency_gen.register(KeptMaps)
    for _ in range(2):
        np.testing.assert_array_equal(saliency_gen.attribute(
            model, images, "kept_maps", targets, times_input=True), 2.0 * images)
    assert (kept == 2.0).all()
    with pytest.raises(models.UserError, match="gradient_sign takes no noise wrapper"):
        saliency_gen.attribute(model, images, "smoothgrad(gradient_sign)", targets)


def test_a_numpy_method_named_by_its_string_runs_eagerly_when_marked(linear, on_path):
    """A NumPy function named "module:function" is traced like any other: one line saying it
    gets symbolic tensors and how to run it eagerly; marked `traced = False`, it runs."""
    model, _, images, _ = linear
    with pytest.raises(models.UserError) as error:
        saliency_gen.attribute(model, images, "numpy_attribution:sign")
    assert "the function is traced, so its images are symbolic tensors" in str(error.value)
    assert "setting traced = False on the function" in str(error.value)
    np.testing.assert_array_equal(
        saliency_gen.attribute(model, images, "numpy_attribution:sign_eager"), np.sign(images))


@pytest.mark.parametrize("body, message", [
    (lambda m, x, t: x[:, :4], "returned maps of shape (2, 4, 8, 3) for images of shape "
                               "(2, 8, 8, 3); return [B, H, W, C] = [2, 8, 8, 3]"),
    (lambda m, x, t: x / 0.0 * 0.0, "returned NaN or infinite values for image 0"),
    (lambda m, x, t: 1 / 0, "raised ZeroDivisionError: division by zero"),
    (lambda m, x, t: "maps", "returned str of dtype string, not numbers"),
])
def test_a_broken_user_method_gets_one_clear_line(linear, body, message):
    model, _, images, targets = linear
    _register("broken", body)
    with pytest.raises(models.UserError) as error:
        saliency_gen.attribute(model, images[:2], "broken", targets[:2], batch_size=2)
    assert "method 'broken'" in str(error.value) and message in str(error.value)
    assert "\n" not in str(error.value)


def test_spec_string_errors_and_name_rules(on_path):
    model, _ = linear_model(SHAPE)
    images = np.zeros((1, *SHAPE), np.float32)
    with pytest.raises(models.UserError, match="cannot import module 'no_such_module'"):
        saliency_gen.attribute(model, images, "no_such_module:fn")
    with pytest.raises(models.UserError, match="module 'blob_attribution' has no 'nothing'"):
        saliency_gen.attribute(model, images, "blob_attribution:nothing")
    with pytest.raises(models.UserError, match="starts with a naming scheme's prefix"):
        saliency_gen.register_method("roar:mine", lambda m, x, t: x)
    saliency_gen.register_method("mine", lambda m, x, t: x)
    with pytest.raises(models.UserError, match="a method called 'mine' is already registered"):
        saliency_gen.register_method("mine", lambda m, x, t: x)
    with pytest.raises(models.UserError, match="a method called 'gradient' is already"):
        saliency_gen.register_method("gradient", lambda m, x, t: x)


def test_every_builtin_unit_declares_its_parameters_and_cost():
    shape = (16, 16, 3)
    for name in saliency_gen.attribution.names.builtin_bases():
        unit = units.unit(name)
        assert unit.name == name and unit.summary, name
        options = {key: param.default for key, param in unit.params.items()}
        assert unit.steps(options, shape) >= 1, name
        assert (unit.evaluations(options, shape) == 0) == (not unit.views), name
    costs = {name: units.unit(name).evaluations(
        {key: p.default for key, p in units.unit(name).params.items()}, shape)
        for name in ("gradient", "integrated_gradients", "guided_grad_cam", "sobel", "rise")}
    assert costs == {"gradient": 1, "integrated_gradients": 25, "guided_grad_cam": 2,
                     "sobel": 0, "rise": 6000}
    occlusion = units.unit("occlusion")
    assert occlusion.steps({"size": 4, "stride": 4, "value": 0.0}, shape) == 1 + 16


def test_the_code_digest_reads_the_user_modules_a_method_imports(tmp_path, monkeypatch):
    """An edited helper in another file of the researcher's code changes the method's digest
    (before: only the method's own module was read, and the card showed the old numbers); the
    libraries and the project's own packages are not read, and a method whose module imports no
    other user module digests as it did before (its source, then its module file)."""
    (tmp_path / "helpers.py").write_text("def post(maps):\n    return maps\n")
    (tmp_path / "method_with_helper.py").write_text(
        "import numpy as np\nimport saliency_gen\nfrom helpers import post\n\n\n"
        "def saliency(model, images, targets):\n    return post(images)\n")
    (tmp_path / "method_alone.py").write_text(
        "import numpy as np\n\n\ndef saliency(model, images, targets):\n    return images\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    method = importlib.import_module("method_with_helper").saliency
    alone = importlib.import_module("method_alone").saliency
    assert code_identity.user_modules(method) == [
        ("method_with_helper", str(tmp_path / "method_with_helper.py")),
        ("helpers", str(tmp_path / "helpers.py"))]
    source = inspect.getsource(alone).encode()
    assert code_identity.code_digest(alone) == hashlib.sha256(
        source + b"\0module\0" + (tmp_path / "method_alone.py").read_bytes()).hexdigest()[:16]
    before = code_identity.code_digest(method)
    (tmp_path / "helpers.py").write_text("def post(maps):\n    return -maps\n")
    assert code_identity.code_digest(method) != before


NOTEBOOK_CELLS = '''
import tensorflow as tf
SCALE = {scale}


def post(maps):
    return maps * SCALE


def saliency(model, images, targets):
    return post(images)
'''


def test_a_notebook_method_s_digest_reads_its_helpers_and_constants_as_they_run(monkeypatch):
    """Code without a module file (a notebook's cells, here `exec`) is digested with the
    helpers and constants of its module that it reads, at each use: a helper or a constant
    redefined in another cell changes the registered method's digest without registering it
    again (before: the digest of the function alone, taken when it was registered)."""
    notebook = types.ModuleType("notebook_cells")
    monkeypatch.setitem(sys.modules, notebook.__name__, notebook)
    exec(NOTEBOOK_CELLS.format(scale=2.0), vars(notebook))
    unit = plugins.FunctionMethod("notebook_method", notebook.saliency)
    first = unit.code
    assert unit.code == first
    exec("SCALE = 3.0", vars(notebook))
    second = unit.code
    exec("def post(maps):\n    return maps * SCALE + 1\n", vars(notebook))
    assert len({first, second, unit.code}) == 3


def test_an_edit_after_the_import_is_one_warning_the_imported_code_runs(tmp_path, monkeypatch,
                                                                        caplog):
    """A notebook imported the method's module, then the file was edited: the process still
    runs the imported code under its digest (its old results are reused), and says so once
    (before: nothing said the edit was not running)."""
    (tmp_path / "imported_method.py").write_text(
        "def saliency(model, images, targets):\n    return images\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    unit = plugins.FunctionMethod("imported_method:saliency",
                                  importlib.import_module("imported_method").saliency)
    loaded = unit.code
    plugins.warn_if_edited(unit, "imported_method:saliency", loaded)
    assert not caplog.records
    (tmp_path / "imported_method.py").write_text(
        "def saliency(model, images, targets):\n    return -images\n")
    for _ in range(2):
        plugins.warn_if_edited(unit, "imported_method:saliency", loaded)
    assert unit.code == loaded
    assert [record.getMessage() for record in caplog.records] == [
        "the files of method imported_method:saliency (imported_method.py) changed since it was "
        "imported; this process files its results under the code as imported, so a re-run here "
        "can show that code's results: start a new process, or reload the module and register "
        "the method again, to run the edit under its own digest"]


def test_the_check_for_an_edit_reads_the_files_again_only_once_one_changed(tmp_path, monkeypatch,
                                                                          caplog):
    """Naming a method checks its files for an edit at every call: their digest is kept with the
    files' states and taken again only when one of them changed (before: taken again at every
    call, 1.3-2.0 ms of a cheap CNN's 24-image call of some 6 ms); a same-size edit of a helper in
    another file is still seen, and said once; a file written just now is read at every call."""
    helpers = tmp_path / "edit_checked_helpers.py"
    helpers.write_text("def post(maps):\n    return maps * 1\n")
    (tmp_path / "edit_checked_method.py").write_text(
        "from edit_checked_helpers import post\n\n\n"
        "def saliency(model, images, targets):\n    return post(images)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    name = "edit_checked_method:saliency"
    unit = plugins.FunctionMethod(name, importlib.import_module("edit_checked_method").saliency)
    loaded = unit.code
    taken = []  # each digest reads the module files once
    read = code_identity._module_bytes
    monkeypatch.setattr(code_identity, "_module_bytes", lambda obj: taken.append(obj) or read(obj))
    for _ in range(2):  # written just now: read again
        plugins.warn_if_edited(unit, name, loaded)
    assert len(taken) == 2
    monkeypatch.setattr(file_digests, "RECENT_NS", 0)
    for _ in range(3):  # taken once more, then kept
        plugins.warn_if_edited(unit, name, loaded)
    assert len(taken) == 3 and not caplog.records
    helpers.write_text("def post(maps):\n    return maps * 2\n")  # the same size
    for _ in range(3):
        plugins.warn_if_edited(unit, name, loaded)
    assert len(taken) == 4
    assert [record.getMessage().split(";")[0] for record in caplog.records] == [
        "the files of method edit_checked_method:saliency (edit_checked_method.py, "
        "edit_checked_helpers.py) changed since it was imported"]
