"""The shared foundation: the chunked executor, the model adapter and the command-line
convention (config dataclass -> flags -> config -> run)."""
import dataclasses
import json
import os
import subprocess
import sys
import time
from typing import Optional

import keras
import numpy as np
import pytest
import tensorflow as tf
from absl import flags

import models
from models.formats.adapter import CallableAdapter, KerasAdapter, LoadedAdapter, adapt
from models.foundation import cli, executor, rules, transfer
from models.foundation.errors import UserError, first_non_finite

COUNTS_AND_CHUNKS = [(10, 1), (10, 3), (10, 4), (10, 16), (10, 128), (256, 128), (300, 128)]


@pytest.mark.parametrize("count, chunk", COUNTS_AND_CHUNKS)
def test_collect_gives_every_item_once_in_order(count, chunk):
    run = tf.function(lambda: executor.collect(
        tf.constant(count), chunk,
        lambda items: tf.cast(items, tf.float32)[:, None] * [1.0, -1.0], item_shape=[2]))
    np.testing.assert_array_equal(run().numpy(), np.stack([np.arange(count),
                                                           -np.arange(count)], 1))


@pytest.mark.parametrize("count, chunk", [(1, 1), (10, 10), (10, 16)])
def test_a_count_known_when_tracing_that_fits_one_chunk_runs_without_a_loop(count, chunk):
    run = tf.function(lambda: executor.collect(
        count, chunk,
        lambda items: tf.cast(items, tf.float32)[:, None] * [1.0, -1.0], item_shape=[2]))
    np.testing.assert_array_equal(run().numpy(), np.stack([np.arange(count),
                                                           -np.arange(count)], 1))
    traced = {op.type for op in run.get_concrete_function().graph.get_operations()}
    assert not traced & {"While", "StatelessWhile"}, traced


@pytest.mark.parametrize("count, chunk", COUNTS_AND_CHUNKS)
def test_accumulate_sums_per_slot_and_drops_the_padding(count, chunk):
    # `count` items in slots of 4 items each; each share is 2 ** (item % 4): exact sums.
    def compute(items):
        return items // 4, (tf.pow(2.0, tf.cast(items % 4, tf.float32))[:, None],)

    slots = -(-count // 4)
    buffers = executor.Buffers([tf.float32])
    run = tf.function(lambda: executor.accumulate(tf.constant(count), chunk, compute,
                                                  (tf.zeros([slots + 1, 1]),), buffers))
    expected = np.bincount(np.arange(count) // 4, 2.0 ** (np.arange(count) % 4))
    for _ in range(2):  # the in-place sums start from zero at every call
        (sums,) = run()
        np.testing.assert_array_equal(sums.numpy()[:, 0], expected)
    assert buffers.variables[0].numpy().size == 0  # emptied: nothing kept between calls


@pytest.mark.parametrize("chunk", [1, 3, 8, 128])
def test_accumulate_adds_in_item_order(chunk):
    # In float32, 1e8 + 1 == 1e8: the slot's sum is 1 only when its items are added in order
    # (1e8, 1, -1e8, 1); any other order gives 0, 2 or 1e8.
    values = tf.constant([1e8, 1.0, -1e8, 1.0] * 8)

    def compute(items):
        return items // 4, (tf.gather(values, items)[:, None],)

    buffers = executor.Buffers([tf.float32])
    run = tf.function(lambda: executor.accumulate(tf.constant(32), chunk, compute,
                                                  (tf.zeros([9, 1]),), buffers))
    np.testing.assert_array_equal(run()[0].numpy()[:, 0], np.ones(8, np.float32))


@pytest.mark.parametrize("count, chunk, computed", [(300, 128, 320), (300, 64, 320),
                                                    (256, 128, 256), (10, 128, 32)])
def test_left_over_items_run_in_quarter_chunks(count, chunk, computed):
    # 300 items: two whole chunks of 128, then 44 items in two tail chunks of 32 (a third whole
    # chunk would compute 384); chunks under 128 items keep one size.
    seen = tf.Variable(0)

    def compute(items):
        with tf.control_dependencies([seen.assign_add(tf.size(items))]):
            return tf.cast(items, tf.float32)

    tf.function(lambda: executor.collect(tf.constant(count), chunk, compute))()
    assert int(seen.numpy()) == computed


def test_a_long_stream_is_split_evenly_into_few_chunk_sizes():
    assert executor.chunk_size(24, 64) == 24 and executor.chunk_size(96, 64) == 48
    sizes = set()
    for items in range(65, 3000):
        chunk = executor.chunk_size(items, 64)
        chunks = -(-items // chunk)
        assert chunks == -(-items // 64)  # no more chunks than chunks of 64 would take
        assert chunks * chunk - items < chunks * executor.CHUNK_QUANTUM  # padding: < 4 a chunk
        sizes.add(chunk)
    assert sizes == set(range(36, 65, 4))


def test_groups_cover_every_image_within_the_budgets():
    assert list(executor.groups(10, 100, 450)) == [(0, 4), (4, 8), (8, 10)]
    assert list(executor.groups(600, 1, 1 << 30)) == [(0, 256), (256, 512), (512, 600)]
    assert list(executor.groups(3, 10 ** 9, 1)) == [(0, 1), (1, 2), (2, 3)]  # at least one


def test_the_adapter_separates_outputs_from_logits(tmp_path):
    keras.utils.set_random_seed(0)
    base = models.build("plain_cnn", 3, (16, 16, 3))
    with_softmax = keras.Model(base.input, keras.layers.Softmax()(base.output))
    images = np.random.default_rng(0).normal(0, 1, (5, 16, 16, 3)).astype(np.float32)
    adapter = adapt(with_softmax)
    assert isinstance(adapter, KerasAdapter) and adapter.num_classes == 3
    assert adapter.input_shape == (16, 16, 3) and adapter.preprocessing is None
    np.testing.assert_allclose(adapter.outputs(images).numpy().sum(1), 1.0, rtol=1e-6)
    logits = base(images).numpy()
    np.testing.assert_allclose(adapter.logits(images).numpy(), logits, rtol=1e-6)
    np.testing.assert_allclose(adapter.predict(images, batch_size=2), logits, rtol=1e-5,
                               atol=1e-7)
    models.export(base, tmp_path / "m")
    loaded = adapt(str(tmp_path / "m"))
    assert isinstance(loaded, LoadedAdapter) and loaded.preprocessing == "caffe_rgb"
    np.testing.assert_allclose(loaded.predict(images, batch_size=4), logits, rtol=1e-5,
                               atol=1e-6)
    sequential = keras.Sequential([keras.Input((16, 16, 3)), base, keras.layers.Softmax()])
    np.testing.assert_allclose(adapt(sequential).logits(images).numpy(), logits, rtol=1e-6)
    plain = adapt(lambda x: {"scores": tf.reduce_sum(x, [1, 2])}, output_key="scores")
    assert isinstance(plain, CallableAdapter) and plain.num_classes is None
    np.testing.assert_allclose(plain.predict(images), images.sum((1, 2)), rtol=1e-5)
    with pytest.raises(models.UserError, match="has no guided-backprop view"):
        plain.prepare(guided=True)
    with pytest.raises(models.UserError, match="is not a SavedModel directory"):
        adapt(str(tmp_path))
    reloaded = models.load(tmp_path / "m")  # one adapter per loaded model: traced once
    assert adapt(reloaded) is adapt(reloaded) and adapt(reloaded).loaded is reloaded
    with pytest.raises(models.UserError, match="re-export it to use 'other'"):
        adapt(reloaded, "other")


def test_the_first_non_finite_row_is_found():
    values = np.ones((4, 3, 2), np.float32)
    assert first_non_finite(values) is None
    assert first_non_finite(np.full((3, 2), 3e38, np.float32)) is None  # large, yet finite
    assert first_non_finite(np.arange(6).reshape(3, 2)) is None  # integers are finite
    assert first_non_finite(np.zeros((0, 5), np.float32)) is None
    for bad in (np.nan, np.inf, -np.inf):
        values[2, 1, 0] = bad
        assert first_non_finite(values) == 2
    values[1, 0, 0], values[2, 1, 0] = np.inf, -np.inf
    assert first_non_finite(values) == 1


def test_a_tensor_from_a_host_array_is_an_aligned_copy_of_its_own():
    source = np.random.default_rng(0).normal(size=(5, 7, 3)).astype(np.float64)
    tensor = transfer.tensor_from(source[:, 1:])  # not contiguous, float64: cast to float32
    expected = source[:, 1:].astype(np.float32)
    source[:] = 0.0  # the tensor shares nothing with its source
    assert tensor.dtype == tf.float32 and tensor.shape == (5, 6, 3)
    np.testing.assert_array_equal(tensor.numpy(), expected)
    assert np.asarray(tensor).ctypes.data % transfer.ALIGNMENT == 0
    assert transfer.tensor_from(np.zeros((0, 4), np.float32)).shape == (0, 4)


@dataclasses.dataclass(frozen=True)
class _Config:
    name: str = cli.option("x", "A name.")
    count: int = cli.option(3, "A count.")
    ratio: Optional[float] = cli.option(None, "A ratio.")
    items: tuple = cli.option(("a", "b"), "Items.")
    mode: str = cli.option("fast", "A mode.", ("fast", "slow"))
    on: bool = cli.option(False, "A switch.")


def test_a_config_becomes_flags_and_the_flags_a_config():
    values = flags.FlagValues()
    cli.define_flags(_Config, values)
    values(["prog", "--count=7", "--ratio=0.5", "--items=c,d,e", "--mode=slow", "--on"])
    config = cli.config_from_flags(_Config, values)
    assert config == _Config(name="x", count=7, ratio=0.5, items=("c", "d", "e"), mode="slow",
                             on=True)
    assert values["mode"].help.endswith("A mode.")
    with pytest.raises(flags.IllegalFlagValueError):
        values(["prog", "--mode=medium"])


def test_options_are_checked_by_their_rules_when_the_config_is_built():
    @dataclasses.dataclass(frozen=True)
    class Config(rules.Checked):
        count: int = cli.option(2, "Items.", rule=rules.at_least(1))
        ratios: tuple = cli.option(("0.1",), "Fractions.",
                                   rule=(rules.WHOLE_PERCENTS, rules.UNIQUE_NUMBERS))
        orders: tuple = cli.option(("morf",), "Orders.", rule=rules.some_of(("morf", "lerf"),
                                                                            "order"))
        unit: str = cli.option("pixel", "Unit.", ("pixel", "element"))
        epochs: Optional[float] = cli.option(None, "Epochs.", rule=rules.POSITIVE)

    config = Config()
    for changes, message in (
            ({"count": 0}, "--count=0 must be at least 1"),
            ({"ratios": ("0.1", "0.555")}, "--ratios=0.555 must be a multiple of 0.01 in"),
            ({"ratios": ("0.5", "0.50")}, "--ratios names 0.5 twice"),
            ({"orders": ()}, "--orders names no order; choose from morf, lerf"),
            ({"orders": ("morf", "up")}, "--orders: unknown order 'up'; choose from morf, lerf"),
            ({"unit": "patch"}, "--unit must be one of pixel, element; got 'patch'"),
            ({"epochs": 0.0}, "--epochs=0.0 must be positive")):
        with pytest.raises(UserError) as error:  # also when a caller changes a built config
            dataclasses.replace(config, **changes)
        assert str(error.value).startswith(message), (changes, str(error.value))
    assert Config(epochs=None, count=5).count == 5  # an option left out is not checked


def test_roar_ratio_is_refused_where_the_config_is_built():
    from roar import train

    with pytest.raises(UserError, match=r"^--ratio=0.555 must be a multiple of 0.01 in \[0, 1\]"):
        train.Config(ratio=0.555)


def test_start_up_logs_stay_hidden_unless_asked_for(monkeypatch):
    monkeypatch.setattr("sys.argv", ["prog"])
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    assert not cli.user_asked_for_logs()
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")
    assert cli.user_asked_for_logs()
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL")
    monkeypatch.setattr("sys.argv", ["prog", "--verbosity=1"])
    assert cli.user_asked_for_logs()
    assert os.environ.get("TF_CPP_MIN_LOG_LEVEL") is None


def test_a_start_up_after_tensorflow_says_once_that_onednn_stayed_off(monkeypatch, capsys):
    """`fast_kernels` can no longer turn oneDNN on once TensorFlow is loaded: where TensorFlow
    left it off and the user set nothing, one warning line, once per process; nothing where it
    is on or the user chose. The suite's own start-up came first, so TensorFlow follows the
    setting here (on, unless the suite runs with TF_ENABLE_ONEDNN_OPTS=0)."""
    assert "tensorflow" in sys.modules  # loaded, as in a process that imported it first
    assert cli.onednn_enabled() is (os.environ["TF_ENABLE_ONEDNN_OPTS"] != "0")
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS")
    monkeypatch.setattr(cli, "_late_start_warned", False)
    monkeypatch.setattr(cli, "onednn_enabled", lambda: True)
    cli.fast_kernels()
    assert capsys.readouterr().err == ""  # on: nothing to say
    monkeypatch.setattr(cli, "onednn_enabled", lambda: False)
    cli.fast_kernels()
    cli.start_process()  # the second start-up of the process says nothing more
    assert capsys.readouterr().err == cli.LATE_START_WARNING + "\n"
    assert "TF_ENABLE_ONEDNN_OPTS" not in os.environ  # too late to set: not pretended
    monkeypatch.setattr(cli, "_late_start_warned", False)
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")  # the user's choice: nothing to say
    cli.fast_kernels()
    assert capsys.readouterr().err == ""


def test_after_the_start_up_tensorflow_loads_quietly():
    """After `cli.start_process` (every binary's start-up) the first model loads TensorFlow and
    its C++ start-up lines stay hidden: stderr stays empty. (That importing the packages and
    binaries loads no TensorFlow is tests/test_help.py's.)"""
    import subprocess

    from tests import REPO

    heavy = ("from models.foundation import cli; cli.start_process(); import models; "
             "models.build('small_cnn', 3, (16, 16, 3)); print('built')")
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    done = subprocess.run([sys.executable, "-c", heavy], cwd=REPO, capture_output=True,
                          text=True, timeout=300, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "built", done.stderr[-2000:]
    assert done.stderr == ""


def test_a_flat_call_passes_the_tensors_and_the_captures_current_values():
    """`tracing.flat_call` (how the engine calls its traced stream): with the installed
    TensorFlow the concrete function is called through its flat call (a TensorFlow without one
    would silently fall back to the public call, half a millisecond a call slower: this fails
    first), with the captured variables' current values; an object without a flat call is used
    as it is."""
    from models.foundation.tracing import flat_call

    offset = tf.Variable(1.0)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32),
                                  tf.TensorSpec([None], tf.int32)])
    def shifted(x, k):
        return 2.0 * x + offset + tf.cast(k, tf.float32)

    concrete = shifted.get_concrete_function()
    flat = flat_call(concrete)
    assert flat is not concrete
    x, k = tf.constant([1.0, 2.0]), tf.constant([0, 3])
    assert flat(x, k).numpy().tolist() == concrete(x, k).numpy().tolist() == [3.0, 8.0]
    offset.assign(-1.0)
    assert flat(x, k).numpy().tolist() == [1.0, 6.0]
    plain = lambda *tensors: tensors  # noqa: E731
    assert flat_call(plain) is plain


def test_a_lazy_module_imports_on_first_use_and_forwards_settings(tmp_path, monkeypatch):
    import pickle

    from models.foundation.lazy import lazy_module

    (tmp_path / "lazy_probe.py").write_text("VALUE = 41\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    probe = lazy_module("lazy_probe")
    again = pickle.loads(pickle.dumps(probe))  # by name (Beam pickles a binary's globals)
    assert "lazy_probe" not in sys.modules  # nothing imported yet
    assert again.__name__ == "lazy_probe" and again.VALUE == 41
    assert probe.VALUE == 41 and "lazy_probe" in sys.modules
    probe.VALUE = 42  # a setting (a test's monkeypatch) reaches the real module
    assert sys.modules["lazy_probe"].VALUE == 42
    assert lazy_module("lazy_probe") is sys.modules["lazy_probe"]  # once imported, itself
    del sys.modules["lazy_probe"]


def test_an_output_lock_refuses_a_second_writer_and_leaves_nothing_behind(tmp_path):
    from models.foundation import files
    from models.foundation.errors import UserError
    target = tmp_path / "result.json"
    with files.exclusive(target):
        assert os.listdir(tmp_path) == [".result.json.lock"]
        with pytest.raises(UserError, match=r"result\.json is being written by process"):
            with files.exclusive(target):
                pass
    assert os.listdir(tmp_path) == []
    with files.exclusive(target):  # free again once released
        pass
    with files.build_lock(target, "a cache"):  # a builder writes its outputs under their lock
        with files.exclusive(target):
            assert sorted(os.listdir(tmp_path)) == [".result.json.build.lock", ".result.json.lock"]
    if os.path.isdir("/proc/self"):  # a folder that exists but takes no new file: one line
        with pytest.raises(UserError, match=r"^cannot make the lock file /proc/\.card\.lock "
                                            r"\(No such file or directory\); choose another"):
            with files.exclusive("/proc/card"):
                pass


_HOLD_THE_BUILD_LOCK = """
import sys, time
from models.foundation import files
with files.build_lock(sys.argv[1], "the test cache"):
    with files.build_lock(sys.argv[1], "the test cache"):  # nested: taken once
        print("holding", flush=True)
        time.sleep(2.0)
    print(f"released {time.time()}", flush=True)
"""


def test_a_second_builder_of_a_cache_waits_for_the_first_and_says_for_whom(tmp_path):
    from models.foundation import files
    target = str(tmp_path / "cache")
    first = subprocess.Popen([sys.executable, "-c", _HOLD_THE_BUILD_LOCK, target],
                             stdout=subprocess.PIPE, text=True)
    assert first.stdout.readline() == "holding\n"
    told = []
    with files.build_lock(target, "the test cache", log=told.append):
        entered = time.time()
    released = float(first.stdout.readline().split()[1])
    assert first.wait(timeout=30) == 0
    assert entered >= released  # the whole block waited, not only its first step
    assert os.listdir(tmp_path) == []  # the lock file goes with the last holder
    assert told == [f"waiting for process {first.pid} on host {os.uname().nodename}, which is "
                    f"building the test cache in {target}"]


def test_threads_of_one_process_take_turns_on_a_build_lock(tmp_path):
    import threading

    from models.foundation import files
    target, events, holding = str(tmp_path / "cache"), [], threading.Event()

    def hold():
        with files.build_lock(target, "the test cache"):
            events.append("thread in")
            holding.set()
            time.sleep(0.5)
            events.append("thread out")

    thread = threading.Thread(target=hold)
    thread.start()
    holding.wait(timeout=30)
    with files.build_lock(target, "the test cache", log=events.append):
        events.append("main in")
    thread.join()
    assert events[0] == "thread in" and events[1].startswith("waiting for process ")
    assert events[2:] == ["thread out", "main in"]


def test_the_world_cache_is_built_under_its_lock(tmp_path, monkeypatch):
    import fcntl

    from saliency_gen.data.world import cache, synthetic
    folder = str(tmp_path / "seed7")
    lock = os.path.join(folder, ".world.build.lock")

    def build_world(data_dir, **settings):
        with open(lock) as other:  # another open file: a second taker
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return {"reused": True}

    monkeypatch.setattr(synthetic, "build_world", build_world)
    assert cache.world(7, folder) == os.path.join(folder, "world")
    assert os.listdir(folder) == []  # released and deleted after the block


def test_an_output_path_of_the_wrong_kind_is_one_line(tmp_path):
    from models.foundation import files
    from models.foundation.errors import UserError
    (tmp_path / "taken").mkdir()
    with pytest.raises(UserError, match=r"cannot write .*taken: it is a folder"):
        files.write_json(tmp_path / "taken", {"a": 1})
    assert os.listdir(tmp_path) == ["taken"]  # no hidden temporary file left behind


GRAPH_FAILURE = ("Graph execution error:\n\nDetected at node check defined at (most recent call "
                 "last):\n  File \"m.py\", line 3, in f\n\nassertion failed: [my check] [x = 2]"
                 "\n\t [[{{node check}}]] [Op:__inference_f_40]")


@pytest.mark.parametrize("failure, expected", [
    (lambda: OSError(28, "No space left on device", "/d/out.json"),
     "error: out of disk space (OSError: [Errno 28] No space left on device: '/d/out.json'); "
     "free space or choose another path, then re-run (finished outputs are kept)"),
    (lambda: OSError("Unable to synchronously create file (file write failed: errno = 28, "
                     "error message = 'No space left on device')"),  # as h5py says it
     "error: out of disk space (OSError: Unable to synchronously create file (file write "
     "failed: errno = 28, error message = 'No space left on device')); free space"),
    (lambda: tf.errors.UnknownError(None, None, "shard.tfrecord; No space left on device"),
     "error: out of disk space (UnknownError: shard.tfrecord; No space left on device)"),
    (lambda: tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor with "
                                                          "shape[4096,224,224,3]"),
     "error: out of memory (ResourceExhaustedError: OOM when allocating tensor with "
     "shape[4096,224,224,3]); lower --batch_size or --chunk_size"),
    (lambda: tf.errors.InvalidArgumentError(None, None, GRAPH_FAILURE),
     "error: InvalidArgumentError: assertion failed: [my check] [x = 2]"),
], ids=["full-disk", "full-disk-hdf5", "full-disk-tfrecord", "out-of-memory", "graph-failure"])
def test_failures_of_the_machine_and_of_tensorflow_are_one_line_with_their_cause(
        failure, expected, monkeypatch, capsys):
    """A full disk (an OSError, HDF5's words for it, a TensorFlow writer's), memory running out
    and a TensorFlow failure no layer explained: one line with the real cause, exit status 2
    (before: tracebacks, or "Graph execution error:" alone)."""
    def fails(config):
        raise failure()

    monkeypatch.setattr("sys.argv", ["prog"])
    with pytest.raises(SystemExit) as ended:
        cli.run_binary(_Config, fails)
    lines = capsys.readouterr().err.strip().splitlines()
    assert ended.value.code == 2 and len(lines) == 1 and lines[0].startswith(expected), lines


def test_a_run_folder_of_an_edited_method_is_trained_afresh_with_a_line(tmp_path, capsys):
    """A ROAR run folder whose origin differs from the request in the method's code alone (its
    maps came from an earlier edit of a user method) is started afresh with one line (before:
    its finished metrics were reused); any other difference is still refused."""
    from models.foundation import provenance
    from models.training import loop

    folder = str(tmp_path / "run")
    old = provenance.origin({"ratio": 0.5, provenance.METHOD_CODE: {"m:f": "a" * 16}})
    assert loop.prepare_run_folder(folder, old, overwrite=False) is None
    (tmp_path / "run" / "metrics.json").write_text('{"top1": 0.5}')
    assert loop.prepare_run_folder(folder, old, overwrite=False) == {"top1": 0.5}
    edited = provenance.origin({"ratio": 0.5, provenance.METHOD_CODE: {"m:f": "b" * 16}})
    assert loop.prepare_run_folder(folder, edited, overwrite=False) is None
    assert "the code of the method whose maps it trains on changed" in capsys.readouterr().out
    assert not (tmp_path / "run" / "metrics.json").exists()
    other = provenance.origin({"ratio": 0.6, provenance.METHOD_CODE: {"m:f": "c" * 16}})
    with pytest.raises(UserError, match=r"was made with method_code=.* \(and 1 more"):
        loop.prepare_run_folder(folder, other, overwrite=False)
    # an output of an earlier ROAD solver is redone too, and the line names the solver
    solver = provenance.IMPUTATION_SOLVER
    assert provenance.code_changed(provenance.origin({"ratio": 0.5, solver: "old"}),
                                   provenance.origin({"ratio": 0.5, solver: "new"}),
                                   "method m") == "ROAD's imputation solver"
    both = provenance.code_changed(
        provenance.origin({solver: "old", provenance.METHOD_CODE: {"m:f": "a"}}),
        provenance.origin({solver: "new", provenance.METHOD_CODE: {"m:f": "b"}}), "method m")
    assert both == "the code of method m and ROAD's imputation solver"
    assert provenance.code_changed(provenance.origin({"ratio": 0.5, solver: "old"}),
                                   provenance.origin({"ratio": 0.6, solver: "new"})) is None
    # an output made before a measure's code had a version is redone when it has one
    assert provenance.code_changed(
        provenance.origin({"ratio": 0.5}),
        provenance.origin({"ratio": 0.5, provenance.MEASURE_CODE: "new"})) == \
        "the measure's code"


def test_what_a_model_keeps_goes_with_the_model():
    """An adapter and its traces refer to their model; kept with it, they are freed with it
    (a weakly keyed table kept every model alive through its own adapter)."""
    import gc
    import weakref

    from models.foundation import tracing

    def used_model() -> weakref.ref:
        model = keras.Sequential([keras.Input((4, 4, 1)), keras.layers.Flatten(),
                                  keras.layers.Dense(2)])
        first = tracing.kept(model, "adapter", lambda: KerasAdapter(model))  # holds the model
        assert tracing.kept(model, "adapter", lambda: None) is first  # built once, reused
        return weakref.ref(model)
    gone = used_model()
    gc.collect()
    assert gone() is None
    assert tracing.kept(None, "x", lambda: 3) == 3  # no attributes: built each time


def test_overlapped_keeps_the_order_holds_two_items_at_most_and_raises_the_calls_error():
    from models.foundation import cluster

    made, consumed, ahead = [], [], []

    def items():
        for index in range(6):
            ahead.append(len(made) - len(consumed))  # items made but not yet taken by a call
            made.append(index)
            yield index

    def square(item):
        time.sleep(0.01 * (item % 2))  # the calls end out of step with the producer
        consumed.append(item)
        return item * item

    assert cluster.overlapped(square, items()) == [0, 1, 4, 9, 16, 25]
    assert max(ahead) <= 2  # the next item is made while one call runs, no further ahead
    with pytest.raises(ZeroDivisionError):
        cluster.overlapped(lambda item: 1 / (item - 3), iter(range(6)))



def test_a_data_listing_is_fingerprinted_by_its_bytes_kept_per_file_state(tmp_path, monkeypatch):
    from models.foundation import file_digests, provenance

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(file_digests, "_KEPT", {})
    monkeypatch.setattr(file_digests, "KEPT_FROM", 1000)  # (1 MiB: smaller files read again)
    monkeypatch.setattr(file_digests, "RECENT_NS", 0)  # (the files below are written just now)
    shard = tmp_path / "train-00000.tfrecord"

    def write(content, second):  # a write at a later time (file times are coarse)
        shard.write_bytes(content)
        os.utime(shard, ns=(second * 10 ** 9, second * 10 ** 9))

    write(b"a" * 1000, 1)
    first = provenance.listing_digest([str(shard)])
    write(b"b" * 1000, 2)  # the same name and size, other bytes: other data
    rewritten = provenance.listing_digest([str(shard)])
    assert rewritten != first
    # a digest is kept under the file's state, in the project cache too: a kept value is
    # served while the file is unchanged (here a planted one), and taken again once it changes
    real, state = os.path.realpath(shard), file_digests.state_of(str(shard))
    with open(file_digests.kept_path(real), encoding="utf-8") as handle:
        assert json.load(handle)["sha256"] == file_digests.file_sha256(str(shard))
    file_digests._keep(real, state, "planted")
    monkeypatch.setattr(file_digests, "_KEPT", {})
    assert file_digests.contents_sha256([str(shard)]) == ["planted"]
    write(b"b" * 1000, 3)  # the same bytes again, written later
    assert provenance.listing_digest([str(shard)]) == rewritten
    # a damaged kept digest is the project's own cache: ignored and taken again
    with open(file_digests.kept_path(real), "w", encoding="utf-8") as handle:
        handle.write("[1, 2")
    monkeypatch.setattr(file_digests, "_KEPT", {})
    assert provenance.listing_digest([str(shard)]) == rewritten
    assert provenance.listing_digest([str(tmp_path / "gone")]) != rewritten
    small = tmp_path / "small.tfrecord"
    small.write_bytes(b"c" * 999)
    assert file_digests.contents_sha256([str(small)]) == [file_digests.file_sha256(str(small))]
    assert not os.path.exists(file_digests.kept_path(os.path.realpath(small)))
    # a file written within RECENT_NS of its digest is read again at every call: its state
    # may not yet show a rewrite within the file system's time resolution
    monkeypatch.setattr(file_digests, "RECENT_NS", 10 ** 12)
    fresh = tmp_path / "fresh.tfrecord"
    fresh.write_bytes(b"d" * 1000)
    assert file_digests.contents_sha256([str(fresh)]) == [file_digests.file_sha256(str(fresh))]
    assert str(fresh) not in file_digests._KEPT
    assert not os.path.exists(file_digests.kept_path(os.path.realpath(fresh)))
