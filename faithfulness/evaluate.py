"""Score attribution methods with a faithfulness protocol: `python -m faithfulness.evaluate`.

    python -m faithfulness.evaluate                      # built-in synthetic world, single deletion
    python -m faithfulness.evaluate --evaluation_protocol=incremental_deletion --id_order=descending
    python -m faithfulness.evaluate --model_path=finetuned/model --input_pattern='val-*' \\
        --explainer='idsds:IxG,idsds:IG-U,idsds:Grad-CAM' --nr_images=1000 --batch_size=50

Images come from image TFRecords (`--input_pattern`, in a seeded shuffled order, the first
`--nr_images`), attributions from `saliency_gen` (explaining the ground-truth label, as IDSDS
does), and the scores from the batched protocols of this package. Prints one row per explainer
and writes JSON (means, excluded counts, per-image values). Without `--model_path` and
`--input_pattern` it uses the synthetic world's validation images and its clean small_cnn (built
once and cached, as for `roar.train`).
"""
import dataclasses
import os
import time
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Union

import numpy as np

import models
from faithfulness import measures
from faithfulness.measures.settings import MeasureSettings
from faithfulness.protocols import BASELINES, METRICS, ORDERS
from models.foundation import progress, provenance
from models.foundation import results as result_files
from models.foundation.cli import option, origin_flags, run_binary
from models.foundation.errors import UserError, require_both_or_neither, required
from models.foundation.files import exclusive, write_json
from models.foundation.lazy import lazy_module
from models.foundation.metric_spec import Group, Measure
from models.foundation.rules import COUNT_OR_ALL, POSITIVE, UNIQUE, Checked, at_least, some

# Loaded on first use: a bad flag is reported before TensorFlow starts (docs/architecture.md).
if TYPE_CHECKING:  # the type checker's view of the same modules
    from faithfulness import protocol_measures, stats
    from faithfulness.measures import protocol as peers
    from models.formats import torch_checkpoints
    from saliency_gen.attribution import engine as saliency_engine
    from saliency_gen.attribution import names
    from saliency_gen.data import pipelines, records
    from saliency_gen.data.world import cache
else:
    protocol_measures = lazy_module("faithfulness.protocol_measures")
    peers = lazy_module("faithfulness.measures.protocol")
    stats = lazy_module("faithfulness.stats")
    torch_checkpoints = lazy_module("models.formats.torch_checkpoints")
    saliency_engine = lazy_module("saliency_gen.attribution.engine")
    records = lazy_module("saliency_gen.data.records")
    pipelines = lazy_module("saliency_gen.data.pipelines")
    cache = lazy_module("saliency_gen.data.world.cache")
    names = lazy_module("saliency_gen.attribution.names")

# single_deletion, incremental_deletion, deletion, insertion, ..., then the peers' measures
# under Quantus's names (faithfulness.measures: sparseness, pointing_game, pixel_flipping, ...)
PROTOCOLS = tuple(METRICS) + tuple(sorted(measures.__all__))
DEFAULT_EXPLAINERS = "idsds:IxG,idsds:IG,idsds:Grad-CAM,idsds:IxG abs,random"

# The IDSDS seed table's explainers by model kind (docs/model_zoo.md, "IDSDS on the synthetic
# world"): post-hoc methods everywhere, CAMs on convolutional networks, and each architecture's
# own explainers on that architecture.
POST_HOC_EXPLAINERS = ("IxG", "IxG-SG", "IG", "IG-U", "RISE")
APPLICABLE = "idsds:applicable"  # --explainer value: every explainer that applies to the model
CAM_EXPLAINERS = ("Grad-CAM", "Grad-CAMpp", "XG-CAM", "Layer-CAM")


def explainers_for(model_name: str) -> list:
    """The IDSDS explainer names (`idsds:...`) that apply to the zoo model `model_name`."""
    native = models.spec(model_name).native
    applicable = list(POST_HOC_EXPLAINERS)
    if "Rollout" not in native:  # a convolutional network
        applicable += CAM_EXPLAINERS
    return [f"idsds:{name}" for name in applicable + list(native)]


@dataclasses.dataclass(frozen=True)
class Options(Checked):
    """How a protocol scores (IDSDS flag names where they exist), checked when built: the
    protocol flags of `python -m faithfulness.evaluate`, declared once here; its `Config` is
    these and where the model, images and output are."""

    grid_rows_and_cols: int = option(4, 'Single deletion grid G (G x G cells).',
                                     rule=at_least(1))
    sd_baseline: str = option("zeros", 'Single deletion baseline.', BASELINES)
    id_baseline: str = option("zeros", 'Incremental deletion baseline.', BASELINES)
    id_steps: int = option(32, 'Incremental deletion steps S.', rule=at_least(1))
    id_order: str = option("ascending", 'Deletion order.', ORDERS)
    id_update_attribution: bool = option(False, 'Re-explain before every step.')
    id_baseline_gaussian_kernel: int = option(51, 'Blur baseline kernel size (odd).',
                                              rule=at_least(1))
    id_baseline_gaussian_sigma: float = option(41.0, 'Blur baseline sigma.', rule=POSITIVE)
    attribution_transform: str = option(
        "raw",
        'Applied to the attribution before the channel sum.',
        ("raw", "abs", "relu"))
    data_replace_method: str = option(
        "",
        "deletion/insertion/iic_ad/add substrate: black or blur (default: the metric's).")
    max_step_nb: int = option(196, 'deletion/insertion: at most this many steps.',
                              rule=at_least(1))
    output_activation: str = option(
        "auto",
        'auto: logits for single deletion (IDSDS), softmax for the others.',
        ("auto", "none", "softmax"))
    batch_size: int = option(32, 'Work items per model call.', origin=False, rule=at_least(1))
    seed: int = option(0, 'Seed of the image order and of every random draw.')

    def protocol_settings(self) -> dict:
        """{name: value} of these settings alone (what a report records as its options)."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(Options)}


def specs_of(protocol: str) -> tuple:
    """The `MetricSpec`s of what a protocol gives."""
    return METRICS[protocol] if protocol in METRICS else (peers.spec_of(protocol),)


def measure_for(loaded: Any, protocol: str, options: "Options") -> "Measure":
    """The protocol's measure (`faithfulness.protocol_measures`), built once per evaluation so
    its traced functions are reused for every explainer and group."""
    return protocol_measures.measure(protocol, loaded, options)


def _score_group(loaded: Any, images: np.ndarray, labels: np.ndarray, ids: np.ndarray,
                 explainer: "Union[str, names.Resolved]", options: "Options",
                 measure: "Measure", maps: Optional[np.ndarray],
                 masks: Optional[np.ndarray] = None) -> dict:
    """Per-image values {metric: [n]} of one explainer (a name, or resolved once by the caller)
    on one group of images, by the protocol's `measure`; `maps` (the explainer's maps of
    `images`, e.g. read from saliency records) replace explaining them; `masks`: the images'
    object masks, where the data has them."""

    def explain(batch, targets, batch_ids=None):
        if maps is not None and batch is images and np.array_equal(targets, labels):
            return maps  # the given maps explain these images for these labels
        return saliency_engine.attribute(loaded, batch, explainer, targets,
                                         batch_size=options.batch_size, seed=options.seed,
                                         ids=ids if batch_ids is None else batch_ids)

    return measure.score(Group(loaded, images, labels, ids, explain, masks, explainer))


def per_image(loaded: Any, images: np.ndarray, labels: np.ndarray, ids: np.ndarray,
              explainer: "Union[str, names.Resolved]", protocol: str, options: "Options",
              measure: "Optional[Measure]" = None, maps: Optional[np.ndarray] = None,
              group_size: int = 256, progress: Optional[Callable[[int], None]] = None,
              masks: Optional[np.ndarray] = None) -> dict:
    """{metric: values [N]} of one explainer on `images`, scored in groups of `group_size`
    images (memory), each group batched by the protocol's measure (`measure_for`, built here
    when not given): the one computation of a faithfulness protocol, which this binary, the
    report card (`faithfulness.card`) and Beam (`faithfulness.beam_scoring`) call. `maps`, when
    given, are the explainer's maps of all `images`, `masks` their object masks (the
    localisation measures need them); `progress(n)` follows each group."""
    measure = measure or measure_for(loaded, protocol, options)
    parts = []
    for start in range(0, len(images), group_size):  # groups of many images
        stop = start + group_size
        parts.append(_score_group(loaded, images[start:stop], labels[start:stop],
                                  ids[start:stop], explainer, options, measure,
                                  None if maps is None else maps[start:stop],
                                  None if masks is None else masks[start:stop]))
        if progress:
            progress(len(images[start:stop]))
    return {metric: np.concatenate([part[metric] for part in parts]) for metric in parts[0]}


def evaluate(loaded: Any, images: np.ndarray, labels: np.ndarray, ids: np.ndarray,
             explainers: "Sequence[Union[str, names.Resolved]]", protocol: str,
             options: Options = Options(), group_size: int = 256,
             progress: Optional[Callable[[int], None]] = None,
             masks: Optional[np.ndarray] = None) -> dict:
    """{explainer name: {metric: {"mean", "n_excluded", "per_image"}}} over all images, scored
    in groups of `group_size` images (memory), each group batched; each explainer (a name or a
    `names.Resolved`) is resolved once."""
    if protocol not in PROTOCOLS:
        raise UserError(f"unknown --evaluation_protocol {protocol!r}; use one of "
                        f"{', '.join(PROTOCOLS)}")
    measure = measure_for(loaded, protocol, options)
    results = {}
    for explainer in [names.resolved(explainer) for explainer in explainers]:
        summary = {}
        for metric, values in per_image(loaded, images, labels, ids, explainer, protocol,
                                        options, measure, group_size=group_size,
                                        progress=progress, masks=masks).items():
            policy = "omit" if metric == "sds" else "propagate"
            mean, excluded = stats.aggregate(values, policy, metric)
            summary[metric] = {"mean": mean, "n_excluded": excluded,
                               "n_nan": int((~np.isfinite(values)).sum()),
                               "per_image": [None if not np.isfinite(v) else float(v)
                                             for v in values]}
        results[explainer.name] = summary
    return results


def table(results: dict, n_images: int, protocol: str) -> str:
    """A readable table: one row per explainer, one column per metric, and the images on
    which every metric is defined; a metric undefined on some images (a constant map or
    curve) says so under the table (docs/faithfulness.md, "Undefined values")."""
    metrics = list(next(iter(results.values())))
    arrows = {spec.name: spec.arrow for spec in specs_of(protocol)}
    rows = [[name, *(f"{summary[m]['mean']:.4f}" if np.isfinite(summary[m]["mean"])
                     else "undefined" for m in metrics),
             f"{n_images - max(summary[m]['n_nan'] for m in metrics)}/{n_images}"]
            for name, summary in results.items()]
    notes = [f"note: {name} {metric} is undefined on {summary[metric]['n_nan']} of {n_images} "
             f"images (a constant map or curve); "
             + ("they are left out of its mean" if summary[metric]["n_excluded"] else
                "its mean is undefined, as in the reference")
             for name, summary in results.items() for metric in metrics
             if summary[metric]["n_nan"]]
    header = ["explainer", *(f"{name} {arrows[name]}" for name in metrics), "images"]
    return "\n".join([result_files.text_table(header, rows,
                                               align="right"), *notes])


# ----------------------------------------------------------------------------------------------
# The binary.

@dataclasses.dataclass(frozen=True)
class Config(MeasureSettings, Options):
    """faithfulness.evaluate's options (one flag each): the protocol settings (`Options`), the
    measures' settings (`MeasureSettings`), then the model, the images, the explainers and the
    output; checked when built."""

    model_path: Optional[str] = option(
        None,
        "Exported model (models.export). Default: the synthetic world's clean small_cnn.",
        origin=False)
    input_pattern: Optional[str] = option(
        None,
        "Image TFRecords. Default: the synthetic world's validation records.", origin=False)
    model: Optional[str] = option(
        None, "With --pretrained_ckpt: the zoo or IDSDS model name of the checkpoint "
        "(resnet50, vgg16_bn, bcos_resnet50, bagnet33, vit_base_patch16_224, ...).")
    pretrained_ckpt: Optional[str] = option(
        None, "A PyTorch state dict (.pth / .pth.tar, as IDSDS releases them), converted to a "
        "SavedModel on first use (models.formats.torch_checkpoints) instead of --model_path.",
        origin=False)
    image_size: int = option(224, "With --pretrained_ckpt: the model's input side.",
                             rule=at_least(1))
    evaluation_protocol: str = option("single_deletion", 'Protocol.', PROTOCOLS)
    explainer: tuple = option(
        tuple(DEFAULT_EXPLAINERS.split(",")),
        "Explainers: saliency_gen method names (idsds:IxG, idsds:IG-U, idsds:Grad-CAM, roar:IG, "
        "random, ...), registered methods or 'package.module:function'; idsds:applicable: "
        "every IDSDS explainer that applies to the zoo model (CAMs on CNNs, its own ones).",
        rule=(some("method"), UNIQUE))
    nr_images: int = option(64, 'Images to score (-1: all).', rule=COUNT_OR_ALL)
    output: Optional[str] = option(None, 'JSON file (default faithfulness_<protocol>.json).',
                                   origin=False)


def run(config: Config) -> dict:
    """Scores every explainer of `config` with its protocol, prints the table and writes the
    JSON report; returns the report."""
    f = config
    check_flags(f)
    output = f.output or f"faithfulness_{f.evaluation_protocol}.json"
    with exclusive(output, "--output"):
        return _run(f, output)


def check_flags(f: Config) -> None:
    """What the options' own rules cannot say (they are checked when the config is built):
    which model and image flags go together."""
    if f.pretrained_ckpt or f.model:
        require_both_or_neither(("model", f.model), ("pretrained_ckpt", f.pretrained_ckpt))
        if f.model_path:
            raise UserError("pass --model_path or --model with --pretrained_ckpt, not both")
        if not f.input_pattern:
            raise UserError("--pretrained_ckpt needs --input_pattern (images for that model)")
    else:
        require_both_or_neither(("model_path", f.model_path),
                                ("input_pattern", f.input_pattern))
    if f.evaluation_protocol in METRICS:
        if f.measure_settings():
            raise UserError(f"--{next(iter(f.measure_settings()))} is a setting of the peers' "
                            f"measures, not of {f.evaluation_protocol}")
    else:  # a setting the chosen measure does not take stops here, before any work
        peers.given_settings(f.evaluation_protocol, f)


def _run(f: Config, output: str) -> dict:
    if f.pretrained_ckpt:  # (check_flags: with --model and --input_pattern)
        checkpoint, model, pattern = required(f, "pretrained_ckpt", "model", "input_pattern")
        model_path = torch_checkpoints.converted_model(checkpoint, model,
                                                       image_size=f.image_size)
    elif f.model_path is None:
        model_path = cache.clean_model(seed=0)
        pattern = os.path.join(cache.records_dir(seed=0), "validation-*")
    else:  # (check_flags: both or neither)
        model_path, pattern = required(f, "model_path", "input_pattern")
    loaded = models.load(model_path)
    explainers = list(f.explainer)
    if explainers == [APPLICABLE]:
        explainers = explainers_for(loaded.name)
    chosen = [names.resolved(explainer) for explainer in explainers]  # unknown: stop now
    localising = f.evaluation_protocol in measures.MASKED
    images, labels, ids, *masks = pipelines.load_images(pattern, loaded, f.nr_images, f.seed,
                                                        with_masks=localising)
    if f.nr_images > len(images):  # as bam.metrics' --num_imgs: never fewer than asked for
        raise UserError(f"--nr_images={f.nr_images} exceeds the {len(images)} images of "
                        f"{pattern}; use at most {len(images)}, or -1 for all")
    print(f"{f.evaluation_protocol}: {len(images)} images of {pattern}, model {loaded.model_id}")
    started = time.time()
    with progress.bar(len(images) * len(explainers), f.evaluation_protocol, "img") as bar:
        results = evaluate(loaded, images, labels, ids, chosen, f.evaluation_protocol, f,
                           progress=bar.update, masks=masks[0] if masks else None)
    seconds = time.time() - started
    print(table(results, len(images), f.evaluation_protocol))
    # every flag that changes results (docs/architecture.md, "Outputs and provenance"); the
    # measures' settings only where given (reports made before they existed stay the same)
    settings = {"measure_settings": f.measure_settings()} if f.measure_settings() else {}
    report = {"protocol": f.evaluation_protocol, "model_path": model_path,
              "model_id": loaded.model_id, "input_pattern": pattern, "n_images": len(images),
              "options": f.protocol_settings(), **settings, "seconds": seconds,
              "results": results,
              "origin": provenance.origin(provenance.with_code(
                  {**origin_flags(f), "protocol": f.evaluation_protocol,
                   "explainer": explainers, **f.protocol_settings(), **settings,
                   **measures.code_settings(f.evaluation_protocol)},
                  {method.name: method.code_origin for method in chosen if method.code}),
                  model_id=loaded.model_id,
                  data=provenance.listing_digest(records.list_files(pattern)))}
    write_json(output, report, indent=1)
    print(f"wrote {output} ({seconds:.0f} s)")
    return report


if __name__ == "__main__":
    run_binary(Config, run)
