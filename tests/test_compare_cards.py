"""scripts/compare_cards.py: two cards' values metric by metric."""
import os

import pytest

from models.foundation.cli import script_module
from models.foundation.errors import UserError
from tests import REPO

HEADER = "metric,method,value,ci_low,ci_high,rank,n,n_excluded,higher_is_better,unit\n"


def _card(path, rows):
    path.write_text(HEADER + "".join(f"{m},{method},{v},{lo},{hi},{rank},20,0,True,image\n"
                                     for m, method, v, lo, hi, rank in rows))
    return str(path)


def test_differences_are_relative_to_the_metrics_range_and_moved_ranks_are_named(tmp_path):
    script = script_module(os.path.join(REPO, "scripts", "compare_cards.py"))
    first = _card(tmp_path / "a.csv", [("D", "x", 0.2, 0.1, 0.3, 2), ("D", "y", 0.6, 0.5, 0.7, 1),
                                       ("E", "x", 1.0, 1.0, 1.0, 1), ("E", "y", "n/a", "", "", "")])
    second = _card(tmp_path / "b.csv", [("D", "x", 0.21, 0.1, 0.33, 1),
                                        ("D", "y", 0.6, 0.5, 0.7, 1), ("E", "x", 1.0, 1.0, 1.0, 1)])
    rows = script.compared(script.read(first), script.read(second))
    assert [row["metric"] for row in rows] == ["D", "E"]
    assert rows[0]["largest"] == pytest.approx(0.01) and rows[0]["relative"] == pytest.approx(0.025)
    assert rows[0]["bounds"] == pytest.approx(0.03) and rows[0]["ranks_moved"] == ["x"]
    assert rows[1]["methods"] == 1 and rows[1]["largest"] == 0 and rows[1]["ranks_moved"] == []
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
    with pytest.raises(UserError, match="is not a card.csv"):
        script.read(str(tmp_path / "bad.csv"))
