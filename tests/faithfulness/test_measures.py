"""The peers' measures (`faithfulness.measures`, docs/measures.md): Quantus 0.6's numbers on
stored inputs (`scripts/quantus_reference.py` ran Quantus in its own environment), known
answers on constructed maps, and one error line per bad argument."""
import json
import math
import os

import numpy as np
import pytest

from faithfulness import measures
from models.foundation.errors import UserError

REFERENCE = os.path.join(os.path.dirname(__file__), "..", "data", "quantus_reference.json")
with open(REFERENCE) as handle:
    STORED = json.load(handle)
ARRAYS = {key: np.asarray(value, np.float32) for key, value in STORED["inputs"].items()}


def call(name, a, s=None, x=None, **settings):
    x = ARRAYS["x"][:len(a)] if x is None else x
    return getattr(measures, name)(None, x, np.zeros(len(x), np.int64), a, s, **settings)


@pytest.mark.parametrize("case", STORED["cases"],
                         ids=lambda case: f"{case['measure']}-{case['maps']}-{case['settings']}")
def test_agrees_with_quantus(case):
    """Every stored case: the same values as Quantus 0.6 (float32 there, float64 here)."""
    needs_mask = measures.family_of(case["measure"]) == "localisation"
    found = call(case["measure"], ARRAYS[case["maps"]], ARRAYS["s"] if needs_mask else None,
                 **case["settings"])
    expected = np.array([np.nan if v is None else v for v in case["values"]], np.float64)
    np.testing.assert_allclose(found, expected, rtol=2e-6, atol=1e-6)


def test_every_measure_has_a_case_and_a_declaration():
    cased = {case["measure"] for case in STORED["cases"]}
    assert cased == set(measures.__all__)
    declared = {spec.name for family in ("complexity_family", "localisation_family")
                for spec in getattr(measures, family).SPECS}
    assert declared == set(measures.__all__)


def test_a_map_equal_to_the_mask_localises_perfectly():
    masks = ARRAYS["s"]
    maps = masks + 0.0
    for name in ("pointing_game", "relevance_mass_accuracy", "relevance_rank_accuracy", "auc"):
        np.testing.assert_allclose(call(name, maps, masks), 1.0, err_msg=name)
    np.testing.assert_allclose(call("attribution_localisation", maps, masks), 1.0, atol=1e-8)
    np.testing.assert_allclose(call("top_k_intersection", maps, masks, k=6), 1.0)
    inverted = 1.0 - masks  # everything outside
    np.testing.assert_allclose(call("auc", inverted, masks), 0.0)
    np.testing.assert_allclose(call("relevance_rank_accuracy", inverted, masks), 0.0)


def test_weighted_and_influence_variants_and_empty_masks():
    masks = np.zeros((2, 8, 8), np.float32)
    masks[0, :2, :8] = 1  # 16 of 64 pixels
    maps = masks + 0.01 * np.arange(64, dtype=np.float32).reshape(8, 8)[None]
    # the maximum (bottom right) is outside the first mask; an empty mask has no value
    assert np.isnan(call("pointing_game", maps, masks)[1])
    assert call("pointing_game", maps, masks)[0] == 1.0  # the mask's 1.15 beats 0.63
    assert call("pointing_game", maps, masks, weighted=True)[0] == pytest.approx(0.75)
    assert call("top_k_intersection", maps, masks, k=8, concept_influence=True)[0] == \
        pytest.approx(4.0)
    share = call("attribution_localisation", maps, masks)[0]
    assert call("attribution_localisation", maps, masks, weighted=True)[0] == \
        pytest.approx(share * 0.25)


def test_complexity_of_constant_and_one_hot_maps():
    constant = np.ones((2, 8, 8), np.float32)
    constant[1] = 0.0
    constant[1, 3, 4] = 5.0  # one-hot
    assert call("complexity", constant)[0] == pytest.approx(math.log(64), rel=1e-9)
    assert call("complexity", constant)[1] == pytest.approx(0.0, abs=1e-9)
    assert call("sparseness", constant)[0] == pytest.approx(0.0, abs=1e-9)
    assert call("sparseness", constant)[1] == pytest.approx(63 / 64, rel=1e-5)
    np.testing.assert_array_equal(call("effective_complexity", constant), [64, 1])
    # divided by the batch's largest |a| (5): the constant map's 0.2 is under eps=0.3
    np.testing.assert_array_equal(call("effective_complexity", constant, eps=0.3), [0, 1])


@pytest.mark.parametrize("arguments, culprit", [
    (dict(name="sparseness", a=np.full((2, 8, 8), np.nan)), "a_batch"),
    (dict(name="sparseness", a=np.ones((2, 4, 4))), "a_batch"),
    (dict(name="sparseness", a=np.ones((2, 8, 8)), s=np.ones((2, 8, 8))), "s_batch"),
    (dict(name="auc", a=np.ones((2, 8, 8))), "s_batch"),
    (dict(name="auc", a=np.ones((2, 8, 8)), s=np.full((2, 8, 8), 2.0)), "s_batch"),
    (dict(name="auc", a=np.ones((2, 8, 8)), s=np.ones((2, 4, 8))), "s_batch"),
    (dict(name="sparseness", a=np.ones((2, 8, 8)), x=np.ones((2, 8, 8))), "x_batch"),
    (dict(name="top_k_intersection", a=np.ones((2, 8, 8)), s=np.ones((2, 8, 8)), k=64), "k"),
])
def test_bad_arguments_are_one_line_naming_them(arguments, culprit):
    with pytest.raises(UserError) as raised:
        call(**arguments)
    assert str(raised.value).startswith(culprit) and "\n" not in str(raised.value)
