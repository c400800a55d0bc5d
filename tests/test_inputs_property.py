"""Property-based checks of every place a value enters (hypothesis): every option of every
binary's Config takes any drawn value (NaN, infinities, huge or negative numbers, empty or odd
lists, any text) as a config or one `UserError` line, never another exception; and the parsers
of files a user hands in (PyTorch checkpoints, TFRecord files, card cells, BAM's object arrays
of masks) take any bytes (random,
or a valid file cut, flipped or spliced) as a value or one `UserError`, with bounded memory."""
import dataclasses
import functools
import importlib
import os
import resource
import tracemalloc
import typing

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.formats import object_arrays, torch_pickle
from models.foundation import cli, rules
from models.foundation.cli import script_module
from models.foundation.errors import UserError
from models.report import card_engine
from saliency_gen.data import records
from tests import REPO, torch_format
from tests.test_help import BINARIES

NUMBERS = st.one_of(
    st.integers(min_value=-10 ** 30, max_value=10 ** 30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 1, 2 ** 31, -2 ** 31 - 1, float("nan"), float("inf"), -0.0, 1e308]))
TEXTS = st.one_of(st.text(max_size=12),
                  st.sampled_from(["", "nan", "inf", "-1", "1e999", "0.555", "a,b", "..", "/"]))
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])


@functools.lru_cache(maxsize=None)
def _config_class(module_name: str) -> type:
    if module_name.startswith("scripts."):
        return script_module(os.path.join(REPO, *module_name.split(".")) + ".py").Config
    return importlib.import_module(module_name).Config


def _strategy(config_class: type, field: dataclasses.Field):
    hints = typing.get_type_hints(config_class)
    kind = cli._kind(hints[field.name], field.default)
    if kind is bool:
        return st.booleans()
    if kind in (int, float):
        return NUMBERS
    if kind is list:
        return st.lists(TEXTS, max_size=4).map(tuple)
    return TEXTS


def _options() -> list:
    """(binary, option name) of every option of every binary."""
    return [(module_name, field.name) for module_name in BINARIES
            for field in dataclasses.fields(_config_class(module_name))]


OPTION_SETTINGS = settings(max_examples=12, deadline=None, derandomize=True, database=None,
                           suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("module_name, option", _options())
@OPTION_SETTINGS
@given(data=st.data())
def test_every_option_takes_any_value_or_one_line(module_name, option, data):
    config_class = _config_class(module_name)
    field = next(f for f in dataclasses.fields(config_class) if f.name == option)
    value = data.draw(_strategy(config_class, field), label=option)
    try:
        config = config_class(**{option: value})
        rules.check_options(config)  # (run_binary checks a config that does not check itself)
    except UserError as error:
        assert "\n" not in str(error) and str(error)
    else:  # accepted: then a number is finite and in range
        if isinstance(value, float):
            assert np.isfinite(value) and abs(value) <= rules.LIMIT
        if isinstance(value, int) and not isinstance(value, bool):
            assert abs(value) <= rules.LIMIT


def _mutations(valid: bytes):
    """Random bytes, or the valid file cut short, with bytes flipped, or spliced."""
    position = st.integers(0, max(len(valid) - 1, 0))
    return st.one_of(
        st.binary(max_size=2048),
        position.map(lambda cut: valid[:cut]),
        st.tuples(position, st.integers(1, 255)).map(
            lambda flip: valid[:flip[0]] + bytes([valid[flip[0]] ^ flip[1]]) + valid[flip[0] + 1:]),
        st.tuples(position, st.binary(min_size=1, max_size=64)).map(
            lambda splice: valid[:splice[0]] + splice[1] + valid[splice[0]:]),
    )


def _valid_files(folder) -> dict:
    """A small valid file of each kind the parsers read."""
    checkpoint = {"conv.weight": np.arange(24, dtype=np.float32).reshape(2, 3, 4),
                  "fc.bias": np.ones(3, np.float32)}
    found = {}
    for legacy in (False, True):
        path = os.path.join(folder, f"checkpoint-{legacy}.pth")
        torch_format.write_checkpoint(path, torch_format.tensors_of(checkpoint), legacy)
        found[f"checkpoint-{legacy}"] = open(path, "rb").read()
    path = os.path.join(folder, "records.tfrecord")
    records.write_records(path, [records.image_example(b"\x89PNG fake", label)
                                 for label in range(3)])
    found["records"] = open(path, "rb").read()
    masks = np.empty(2, dtype=object)  # BAM's val_mask: an object array of masks
    masks[0], masks[1] = np.ones((2, 3), np.uint8), np.zeros((4, 4), bool)
    path = os.path.join(folder, "val_mask.npy")
    np.save(path, masks, allow_pickle=True)
    found["object-array"] = open(path, "rb").read()
    path = os.path.join(folder, "maps.npy")
    np.save(path, np.ones((3, 4, 4), np.float32))
    found["numeric-array"] = open(path, "rb").read()
    cell = {"origin": {"settings": {"benchmark": "B", "method": "m"}, "inputs": {}},
            "values": {"dauc": [0.5, None, 0.25]}}
    found["cell"] = card_engine.json.dumps(cell).encode()
    return found


READERS = {
    "checkpoint-False": torch_pickle.read_checkpoint,
    "checkpoint-True": torch_pickle.read_checkpoint,
    "records": lambda path: records.check_file(path, "image"),
    "cell": lambda path: card_engine._stored_cell(path),
    "object-array": object_arrays.load_object_array,
    "numeric-array": object_arrays.load_object_array,
}


@pytest.fixture(scope="module")
def valid_files(tmp_path_factory):
    return _valid_files(str(tmp_path_factory.mktemp("valid")))


@pytest.mark.parametrize("kind", sorted(READERS))
def test_every_parser_takes_any_bytes_or_one_line_with_bounded_memory(kind, valid_files,
                                                                      tmp_path_factory):
    folder = tmp_path_factory.mktemp(f"fuzz-{kind}")
    path = str(folder / "input")
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux

    @SETTINGS
    @given(data=_mutations(valid_files[kind]))
    def parse(data):
        with open(path, "wb") as handle:
            handle.write(data)
        tracemalloc.start()
        try:
            READERS[kind](path)
        except UserError as error:
            assert "\n" not in str(error)
        finally:
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
        assert peak < 16 * len(data) + (8 << 20), (kind, len(data), peak)

    parse()
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_rss
    assert grown < 256 << 10, f"{kind}: the process grew by {grown} KiB"  # (TF's own buffers)
