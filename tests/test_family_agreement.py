"""scripts/family_agreement.py: the mean Kendall tau between families of a card's columns."""
import json
import os

import numpy as np
import pytest

from models.foundation.cli import script_module
from models.foundation.errors import RecordError
from tests import REPO


def _script():
    return script_module(os.path.join(REPO, "scripts", "family_agreement.py"))


def _card(path, tau):
    metrics = [{"name": "Deletion dauc", "group": ""}, {"name": "a", "group": "complexity"},
               {"name": "b", "group": "complexity"}, {"name": "c", "group": "robustness"}]
    with open(path, "w") as handle:
        json.dump({"metrics": metrics, "agreement": {
            "metrics": [m["name"] for m in metrics], "kendall_tau": tau}}, handle)


def test_family_means_average_the_finite_pairs(tmp_path):
    nan = float("nan")
    tau = [[1.0, 0.2, 0.4, nan],
           [0.2, 1.0, 0.6, -0.5],
           [0.4, 0.6, 1.0, -0.1],
           [nan, -0.5, -0.1, 1.0]]
    _card(tmp_path / "card.json", tau)
    script = _script()
    families, columns, names, matrix = script.read_card(str(tmp_path / "card.json"))
    assert families == ["seed benchmarks", "complexity", "robustness"]
    means, counts = script.family_means(families, columns, names, matrix)
    np.testing.assert_allclose(means[0], [nan, 0.3, nan])  # one seed column: no pair in it
    np.testing.assert_allclose(means[1], [0.3, 0.6, -0.3])  # the NaN pair is left out
    assert counts[1].tolist() == [2, 1, 2] and counts[0, 2] == 0
    by_column = script.column_means(families, columns, names, matrix)
    np.testing.assert_allclose(by_column[1], [0.2, 0.6, -0.5])  # "a" with "b" only, not itself


def test_a_file_that_is_not_a_card_is_one_error(tmp_path):
    (tmp_path / "card.json").write_text(json.dumps({"metrics": []}))
    with pytest.raises(RecordError, match="is not a report card's card.json"):
        _script().read_card(str(tmp_path / "card.json"))
