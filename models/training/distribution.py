"""tf.distribute for the training loop (docs/scale_out.md, "Training on several devices").

* `start(name, cpu_replicas)` creates the process's strategy once, before TensorFlow runs any
  op: `MultiWorkerMirroredStrategy` must be made at program start-up, and logical CPU devices
  (`cpu_replicas`, to try data parallelism without GPUs) can only be configured then.
* `role()` tells a multi-worker run's chief (which writes the run folder) from the others.
* `distribute_training` splits each global training batch over the replicas, so that every
  step sees the one-device batch.
* `fit_compatible(model, strategy, first_batch)` works around two behaviours of Keras 3's `fit`
  with several replicas: it builds the model from a batch drawn through a fresh iterator of the
  training data (which shifts a seeded shuffle's order), and under `MultiWorkerMirroredStrategy`
  (tensorflow/tensorflow#72388) it reduces the step logs with a per-axis mean that fails on
  scalars and builds from a cross-worker reduction of that batch. Here the model is built from
  a local batch of unshuffled data and the scalar logs, which the replicas already agree on,
  are averaged over replicas without an axis. One device is left untouched.
"""
import contextlib
import json
import os
from typing import TYPE_CHECKING, Any, Callable, Iterator

from models.foundation.errors import UserError, check_one_of
from models.foundation.lazy import lazy_module

if TYPE_CHECKING:  # the type checker's view of the same modules
    import tensorflow as tf
else:
    tf = lazy_module("tensorflow")

STRATEGIES = ("default", "mirrored", "multi_worker", "tpu")

_started: dict = {}


def start(name: str = "default", cpu_replicas: int = 0) -> Any:
    """The process's `tf.distribute` strategy called `name`, made on the first call.
    `cpu_replicas` > 1 splits the CPU into that many logical devices (mirrored only)."""
    check_one_of("strategy", name, STRATEGIES)
    if _started:
        if _started["key"] != (name, cpu_replicas):
            raise UserError(f"this process already runs the {_started['key'][0]!r} strategy; "
                            f"start a new process for --strategy={name}")
        return _started["strategy"]
    if cpu_replicas > 1 and name != "mirrored":
        raise UserError("--cpu_replicas needs --strategy=mirrored")
    if name == "default":
        strategy = tf.distribute.get_strategy()
    elif name == "mirrored":
        devices = None
        if cpu_replicas > 1:
            cpu = tf.config.list_physical_devices("CPU")[0]
            try:
                tf.config.set_logical_device_configuration(
                    cpu, [tf.config.LogicalDeviceConfiguration()] * cpu_replicas)
            except RuntimeError:
                raise UserError("--cpu_replicas must be set before TensorFlow runs anything; "
                                "start a new process") from None
            devices = [f"/cpu:{index}" for index in range(cpu_replicas)]
        strategy = tf.distribute.MirroredStrategy(devices)
    elif name == "multi_worker":
        try:
            strategy = tf.distribute.MultiWorkerMirroredStrategy()
        except RuntimeError:
            raise UserError("--strategy=multi_worker must start before TensorFlow runs "
                            "anything; start a new process") from None
    else:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        strategy = tf.distribute.TPUStrategy(resolver)
    _started.update(key=(name, cpu_replicas), strategy=strategy)
    return strategy


def role() -> tuple:
    """(is_chief, task name) of this process in a TF_CONFIG cluster; (True, "chief") without
    one. The chief is the "chief" task, else worker 0."""
    config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    task = config.get("task") or {}
    kind, index = task.get("type", "chief"), int(task.get("index", 0))
    has_chief = "chief" in (config.get("cluster") or {})
    chief = kind == "chief" or (kind == "worker" and index == 0 and not has_chief)
    return chief, f"{kind}-{index}"


def is_multi_worker(strategy: Any) -> bool:
    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)


def evaluation_data(data: Any) -> Any:
    """`data` for a multi-worker evaluation: every worker reads every record (auto-shard by
    data), so the metrics count each test image once whatever the file count."""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.DATA)
    return data.with_options(options)


def distribute_training(strategy: Any, data: Any, global_batch: int) -> Any:
    """The training stream `data` (batches of `global_batch`) split over the replicas of
    `strategy` so that every step sees the same global batch as one device: replica r gets
    rows [r * b, (r + 1) * b) of it, b = global_batch / replicas. Every worker reads every
    record and keeps its rows.

    Built with `distribute_datasets_from_function` rather than Keras' own distribution of the
    dataset: that clones the dataset graph, and the clone's seeded shuffles lose their seeds (a
    different, run-dependent order; checked in tests/roar/test_distributed.py)."""
    if strategy.num_replicas_in_sync == 1:
        return data
    replicas = strategy.num_replicas_in_sync
    if global_batch % replicas:
        raise UserError(f"the global batch {global_batch} must be a multiple of the "
                        f"{replicas} replicas; change --batch_size")
    per_replica = global_batch // replicas

    def make(context):
        local = replicas // context.num_input_pipelines
        start = context.input_pipeline_id * local * per_replica
        stop = start + local * per_replica
        mine = data
        if context.num_input_pipelines > 1:
            mine = data.map(lambda x, y: (x[start:stop], y[start:stop]))
        return mine.unbatch().batch(per_replica, drop_remainder=True)

    return strategy.distribute_datasets_from_function(make)


@contextlib.contextmanager
def fit_compatible(model: Any, strategy: Any,
                   first_batch: Callable[[], tuple]) -> Iterator[None]:
    """Within this context, `model.fit` / `evaluate` run under `strategy` with more than one
    replica. `first_batch()` gives one local (x, y) batch of any size (its shapes build the
    model; take it from data without a shuffle).

    Keras builds a distributed model by drawing a batch from a fresh iterator of the training
    data; with a seeded, reshuffled-per-iteration order that shifts the training order by one
    iteration (one device never does this), so the model is built here instead. Under
    multi-worker the step logs' reduction is also replaced (see the module docstring)."""
    if strategy.num_replicas_in_sync == 1 and not is_multi_worker(strategy):
        yield
        return
    from keras.src.backend.tensorflow import trainer as keras_trainer

    original = keras_trainer.reduce_per_replica

    def reduce_scalars(values, strategy_, reduction="auto"):
        if reduction in ("auto", "mean"):
            def mean(value):
                if isinstance(value, tf.distribute.DistributedValues):
                    return strategy_.reduce("MEAN", value, axis=None)
                return value
            return tf.nest.map_structure(mean, values)
        return original(values, strategy_, reduction)

    with strategy.scope():
        model.optimizer.build(model.trainable_variables)
        model._symbolic_build(data_batch=first_batch())  # noqa: SLF001 (see the module docstring)
    own = model._distribute_strategy  # noqa: SLF001
    model._distribute_strategy = None  # fit then takes the strategy of the scope below
    if is_multi_worker(strategy):
        keras_trainer.reduce_per_replica = reduce_scalars
    try:
        with strategy.scope():
            yield
    finally:
        keras_trainer.reduce_per_replica = original
        model._distribute_strategy = own
