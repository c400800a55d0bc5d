"""`python -m faithfulness.evaluate` and `python -m faithfulness.finetune` on the tiny synthetic
world: results equal the library calls, groups and chunks do not change them, the fine-tuning
recipe's pieces (coupled weight decay, crops, deletions), exports, resume and one-line errors."""
import dataclasses
import json
import os
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import faithfulness
import models
import saliency_gen
from faithfulness import evaluate, finetune, finetuning
from models.training.recipes import RunOptions
from saliency_gen.data import pipelines
from tests import REPO, binaries
from tests.conftest import assert_origin_covers_the_flags, interrupt_at


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    keras.utils.set_random_seed(0)
    model = models.build("small_cnn", 10, (64, 64, 3), width=4)
    path = str(tmp_path_factory.mktemp("model") / "small")
    models.export(model, path, preprocessing="imagenet")
    return path


def test_rebuild_gives_the_exported_weights(tmp_path):
    keras.utils.set_random_seed(1)
    model = models.build("small_cnn", 10, (32, 32, 3))
    models.export(model, str(tmp_path / "m"))
    rebuilt = models.rebuild(str(tmp_path / "m"))
    x = np.random.RandomState(0).rand(3, 32, 32, 3).astype(np.float32)
    np.testing.assert_array_equal(rebuilt(x).numpy(), model(x).numpy())
    keras.utils.set_random_seed(1)
    narrow = models.build("small_cnn", 10, (32, 32, 3), width=4)
    models.export(narrow, str(tmp_path / "w"))
    np.testing.assert_array_equal(models.rebuild(str(tmp_path / "w"))(x).numpy(),
                                  narrow(x).numpy())  # the recorded width is reused
    with pytest.raises(models.UserError, match="builder options"):
        models.rebuild(str(tmp_path / "w"), width=8)


def test_evaluate_equals_the_library_and_ignores_grouping(tiny_world, exported, resolutions):
    root, _ = tiny_world
    loaded = models.load(exported)
    pattern = os.path.join(root, "records", "validation-*")
    images, labels, ids = pipelines.load_images(pattern, loaded, nr_images=20, seed=0)
    again = pipelines.load_images(pattern, loaded, nr_images=20, seed=0)
    np.testing.assert_array_equal(again[0], images)
    assert len(images) == 20 and not np.array_equal(
        pipelines.load_images(pattern, loaded, nr_images=20, seed=1)[2], ids)
    options = evaluate.Options(batch_size=16)
    whole = evaluate.evaluate(loaded, images, labels, ids, ["idsds:IxG"], "single_deletion",
                              options)
    resolutions.clear()
    grouped = evaluate.evaluate(loaded, images, labels, ids, ["idsds:IxG"], "single_deletion",
                                evaluate.Options(batch_size=5), group_size=7)
    assert resolutions == ["idsds:IxG"]  # resolved once for its 3 groups
    maps = saliency_gen.attribute(loaded, images, "idsds:IxG", labels, ids=ids)
    direct = faithfulness.single_deletion(loaded, images, labels, maps)
    rho = np.array(whole["idsds:IxG"]["sds"]["per_image"], dtype=float)
    np.testing.assert_allclose(rho, direct["rho"], atol=1e-9)
    np.testing.assert_allclose(np.array(grouped["idsds:IxG"]["sds"]["per_image"], float), rho,
                               atol=1e-6)
    assert whole["idsds:IxG"]["sds"]["mean"] == pytest.approx(direct["sds"])


def test_evaluate_binary_writes_json_and_a_table(tiny_world, exported, tmp_path):
    root, _ = tiny_world
    output = str(tmp_path / "out" / "deletion.json")
    run = binaries.run(
        [sys.executable, "-m", "faithfulness.evaluate", f"--model_path={exported}",
         f"--input_pattern={os.path.join(root, 'records', 'validation-*')}",
         "--evaluation_protocol=deletion", "--explainer=random,idsds:IxG", "--nr_images=6",
         f"--output={output}"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "idsds:IxG" in run.stdout and "6/6" in run.stdout
    # the metrics' directions, as the report card shows them (faithfulness.protocols)
    assert "dauc ↓" in run.stdout and "dc ↑" in run.stdout
    with open(output, encoding="utf-8") as handle:
        report = json.load(handle)
    assert report["n_images"] == 6 and set(report["results"]) == {"random", "idsds:IxG"}
    assert len(report["results"]["random"]["dauc"]["per_image"]) == 6
    assert_origin_covers_the_flags(evaluate.Config, report["origin"])
    assert not [name for name in os.listdir(tmp_path / "out") if name != "deletion.json"]
    bad = binaries.run([sys.executable, "-m", "faithfulness.evaluate",
                        f"--model_path={exported}"], cwd=REPO, capture_output=True,
                       text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].startswith(
        "error: pass both --model_path and --input_pattern")
    missing = binaries.run([sys.executable, "-m", "faithfulness.evaluate",
                            f"--model_path={exported}", "--input_pattern=/nowhere/*"],
                           cwd=REPO, capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "/nowhere/*" in missing.stderr.splitlines()[-1]


def test_coupled_weight_decay_is_pytorch_sgd():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((3,))
    outputs = keras.layers.Dense(2)(inputs)
    model = finetuning.CoupledDecayModel(inputs, outputs, weight_decay=0.1)
    kernel, bias = [w.copy() for w in model.get_weights()]
    model.compile(keras.optimizers.SGD(0.5), keras.losses.MeanSquaredError())
    x, y = np.zeros((4, 3), np.float32), np.zeros((4, 2), np.float32)
    model.train_on_batch(x, y)  # zero input and target: only the decay term has a gradient
    new_kernel, new_bias = model.get_weights()
    np.testing.assert_allclose(new_kernel, kernel * (1 - 0.5 * 0.1), rtol=1e-6)
    np.testing.assert_allclose(new_bias, bias * (1 - 0.5 * 0.1), rtol=1e-6, atol=1e-7)


def test_random_resized_crop_is_keyed_and_sized():
    image = tf.random.uniform([40, 60, 3])
    first = finetuning.random_resized_crop(image, 32, tf.constant([1, 2], tf.int64))
    again = finetuning.random_resized_crop(image, 32, tf.constant([1, 2], tf.int64))
    other = finetuning.random_resized_crop(image, 32, tf.constant([1, 3], tf.int64))
    assert first.shape == (32, 32, 3)
    np.testing.assert_array_equal(first.numpy(), again.numpy())
    assert not np.array_equal(first.numpy(), other.numpy())


def test_training_pipeline_deletes_cells(tiny_world):
    root, _ = tiny_world
    from models.formats.preprocessing import input_space

    files = sorted(tf.io.gfile.glob(os.path.join(root, "records", "train-*")))
    recipe = finetuning.FinetuneRecipe(batch_size=32, grid=4, min_crop_area=1.0, p_delete=1.0)
    images, _ = next(iter(finetuning.training_dataset(files, 64, input_space("pixels01"), recipe,
                                                    0, 200)))
    zero_pixels = (images.numpy() == 0).all(axis=-1).reshape(32, -1).sum(axis=1)
    assert (zero_pixels >= 16 * 16).all()  # one whole 16 x 16 cell per image


def test_finetune_exports_the_best_epoch_and_resumes_exactly(tiny_world, tmp_path):
    root, _ = tiny_world
    keras.utils.set_random_seed(0)
    start = str(tmp_path / "start")
    models.export(models.build("small_cnn", 10, (64, 64, 3)), start, preprocessing="imagenet")
    train = sorted(tf.io.gfile.glob(os.path.join(root, "records", "train-*")))
    val = sorted(tf.io.gfile.glob(os.path.join(root, "records", "validation-*")))
    recipe = finetuning.FinetuneRecipe(epochs=2, batch_size=50, learning_rate=0.01,
                                     decay_every=1, min_crop_area=0.5)
    run = RunOptions(recipe=recipe)
    whole = finetuning.finetune(train, val, str(tmp_path / "whole"), run, init_model=start)
    output = str(tmp_path / "tuned")
    with pytest.raises(KeyboardInterrupt):  # 4 steps per epoch: killed inside the second
        finetuning.finetune(train, val, output, run, init_model=start,
                          callbacks=[interrupt_at(epoch=1, step=1)])
    assert not os.path.exists(os.path.join(output, "model"))
    result = finetuning.finetune(train, val, output, run, init_model=start)
    assert result["model_id"] == whole["model_id"]
    assert result["val_top1_per_epoch"] == whole["val_top1_per_epoch"]
    assert result["resumptions"] == 1 and result["resumed_at_epochs"] == [1]
    assert result["best_val_top1"] == max(result["val_top1_per_epoch"])
    assert len(result["val_top1_per_epoch"]) == 2  # epoch 1 before the kill, 2 after
    tuned = models.load(os.path.join(output, "model"))
    assert tuned.model_id == result["model_id"] and tuned.preprocessing == "imagenet"
    assert tuned.model_id != models.load(start).model_id
    assert not os.path.exists(os.path.join(output, "backup"))
    evaluated = finetune.run(finetune.Config(mode="eval", checkpoint=os.path.join(output, "model"),
                                             eval_pattern=os.path.join(root, "records",
                                                                       "validation-*")))
    assert evaluated["n_eval"] == result["n_eval"] and evaluated["model_id"] == tuned.model_id
    assert abs(evaluated["top1"] - result["best_val_top1"]) <= 1 / result["n_eval"] + 1e-9
    # Finished: reused as it is; other settings stop with one line.
    assert finetuning.finetune(train, val, output, run, init_model=start) == result
    assert_origin_covers_the_flags(finetune.Config, result["origin"])
    with pytest.raises(models.UserError, match=r"run folder .*tuned was made with seed=0, not 1"):
        finetuning.finetune(train, val, output, dataclasses.replace(run, seed=1),
                          init_model=start)


def test_undefined_values_are_named_and_never_a_bare_nan(tiny_world, exported, tmp_path,
                                                          monkeypatch, capsys):
    root, _ = tiny_world
    monkeypatch.syspath_prepend(os.path.join(REPO, "tests", "data", "user_methods"))
    output = tmp_path / "deletion.json"
    evaluate.run(evaluate.Config(
        model_path=exported, input_pattern=os.path.join(root, "records", "validation-*"),
        evaluation_protocol="deletion", explainer=("constant_attribution:zeros",),
        nr_images=3, max_step_nb=8, output=str(output)))
    printed = capsys.readouterr().out
    assert "undefined" in printed and "0/3" in printed
    assert "note: constant_attribution:zeros dc is undefined on 3 of 3 images" in printed
    text = output.read_text()
    assert "NaN" not in text and "Infinity" not in text
    dc = json.loads(text)["results"]["constant_attribution:zeros"]["dc"]
    assert dc["mean"] is None and dc["per_image"] == [None] * 3 and dc["n_nan"] == 3
