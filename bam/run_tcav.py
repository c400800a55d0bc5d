"""TCAV of BAM's models: `python -m bam.run_tcav --model=obj` (bam.md §9).

    python -m bam.run_tcav --model=obj,scene          # synthetic world; scores and their contrast
    python -m bam.run_tcav --model=scene3 --data_dir=data --model_dir=models --output=scene3.json

Target `dog_bedroom` (its class resolved through `tcav/obj_categories.txt` or
`tcav/scene_categories.txt`), concept `dog_scene`, random sets `random500_0..R-1`, random
counterpart `random_counter_part`, at most `--max_examples` images per set, the model's own
preprocessing (`--tcav_raw_inputs` feeds 0-255 RGB as the original did). Prints a table per model
and writes JSON `{"<bottleneck>": {"score", "std", "p_value", ...}}` (one model) or
`{"<model>": {...}, "tcav_mcs": {"<bottleneck>": obj - scene}}` (several). When both obj and scene
are given, the TCAV model contrast (obj score - scene score per bottleneck) is computed here.
Without `--data_dir` / `--model_dir` it uses the built-in synthetic world and its models.
"""
import os

import numpy as np
from absl import flags

import models
from bam import dataset, tcav
from models.errors import UserError, require_both_or_neither, run_main
from models.files import write_json

TARGET, CONCEPT, COUNTERPART = "dog_bedroom", "dog_scene", "random_counter_part"


def target_class(data_dir, model_name):
    """The logit of `dog_bedroom` for a model: from obj_categories.txt for obj, else
    scene_categories.txt."""
    kind = "obj" if model_name == "obj" else "scene"
    path = os.path.join(data_dir, "tcav", f"{kind}_categories.txt")
    if not os.path.isfile(path):
        raise UserError(f"{path} does not exist; build the TCAV sets of the dataset first")
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            name, _, label = line.strip().rpartition(" ")
            if name == TARGET:
                return int(label)
    raise UserError(f"{path} has no {TARGET} line")


def load_set(data_dir, name, size, preprocessing, max_examples, raw=False):
    """Model inputs [n, size, size, 3] of the first `max_examples` sorted images of a TCAV set
    (`raw`: 0-255 RGB, as the original fed them)."""
    folder = os.path.join(data_dir, "tcav", name)
    files = dataset.sorted_files(folder)[:max_examples]
    if not files:
        raise UserError(f"{folder} holds no images")
    paths = [os.path.join(folder, f) for f in files]
    if raw:
        return dataset.load_pixels(paths, size).astype(np.float32)
    return dataset.model_inputs(paths, size, preprocessing)


def model_tcav(data_dir, model_dir, model_name, bottlenecks=None, num_random_exp=2,
               max_examples=100, seed=0, alpha=0.1, batch_size=64, raw=False):
    """{bottleneck: TcavResult.summary()} of one model."""
    path = os.path.join(model_dir, model_name)
    info = models.read_info(path)
    keras_model = models.rebuild(path)
    tcav_model = tcav.TcavModel(keras_model, batch_size)
    size = info["input_shape"][0]

    def images(name):
        return load_set(data_dir, name, size, info["preprocessing"], max_examples, raw)

    target, concept, counterpart = images(TARGET), images(CONCEPT), images(COUNTERPART)
    randoms = [images(f"random500_{r}") for r in range(num_random_exp)]
    klass = target_class(data_dir, model_name)
    results = {}
    for bottleneck in bottlenecks or tcav.default_bottlenecks(keras_model):
        result = tcav.run_tcav(tcav_model, bottleneck, target, klass, concept, randoms,
                               counterpart, seed=seed, alpha=alpha)
        results[bottleneck] = result.summary()
    return results


def contrast(obj_results, scene_results):
    """TCAV model contrast per bottleneck both models have: obj score - scene score."""
    return {name: obj_results[name]["score"] - scene_results[name]["score"]
            for name in obj_results if name in scene_results}


def table(model_name, results):
    lines = [f"TCAV of {model_name} (concept {CONCEPT}, target {TARGET})",
             f"{'bottleneck':<14} {'score':>6} {'std':>6} {'random':>7} {'p-value':>8}  sig."]
    for name, r in results.items():
        lines.append(f"{name:<14} {r['score']:>6.3f} {r['std']:>6.3f} {r['random_score']:>7.3f} "
                     f"{r['p_value']:>8.3g}  {'yes' if r['significant'] else 'no'}")
    return "\n".join(lines)


def define_flags():
    flags.DEFINE_list("model", ["obj"], "Models under --model_dir: obj, scene, scene1..scene10.")
    flags.DEFINE_string("data_dir", None, "BAM data root with tcav/ (default: synthetic world).")
    flags.DEFINE_string("model_dir", None, "Exported models (default: the synthetic models).")
    flags.DEFINE_string("output", None, "JSON file (default tcav_<models>.json).")
    flags.DEFINE_list("bottlenecks", [], "Bottlenecks (default: block_layer1.. and logit).")
    flags.DEFINE_integer("num_random_exp", 2, "Random sets random500_0..N-1.")
    flags.DEFINE_integer("max_examples", 100, "Images per set.")
    flags.DEFINE_float("alpha", 0.1, "CAV regularisation.")
    flags.DEFINE_integer("seed", 0, "Seed of the CAV splits and SGD.")
    flags.DEFINE_integer("batch_size", 64, "Images per batch.")
    flags.DEFINE_boolean("tcav_raw_inputs", False, "Feed raw 0-255 RGB (the original's bug).")


def main(argv):
    del argv
    f = flags.FLAGS
    require_both_or_neither(("data_dir", f.data_dir), ("model_dir", f.model_dir))
    data_dir, model_dir = f.data_dir, f.model_dir
    if data_dir is None:
        from bam import synthetic_setup

        data_dir, model_dir = synthetic_setup.prepare()
    report = {}
    for name in f.model:
        report[name] = model_tcav(data_dir, model_dir, name, f.bottlenecks or None,
                                  f.num_random_exp, f.max_examples, f.seed, f.alpha,
                                  f.batch_size, f.tcav_raw_inputs)
        print(table(name, report[name]))
    if "obj" in report and "scene" in report:
        report["tcav_mcs"] = contrast(report["obj"], report["scene"])
        print("TCAV model contrast (obj - scene): " + ", ".join(
            f"{name} {value:+.3f}" for name, value in report["tcav_mcs"].items()))
    output = f.output or f"tcav_{'_'.join(f.model)}.json"
    write_json(output, report[f.model[0]] if len(report) == 1 else report, indent=1)
    print(f"wrote {output}")


if __name__ == "__main__":
    define_flags()
    run_main(main)
