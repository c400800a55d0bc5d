"""scripts/profile_card.py: what the card's progress bar estimated was left, against what was."""
import os

from models.foundation.cli import script_module
from tests import REPO


def test_eta_rows_take_the_last_estimate_before_each_share_of_the_cells_time():
    profile = script_module(os.path.join(REPO, "scripts", "profile_card.py"))
    # (seconds since the bar opened, estimated seconds left) after each cell; the last at 100 s
    estimates = [(4.0, 300.0), (30.0, 80.0), (60.0, 50.0), (100.0, 0.0)]
    rows = {row["share"]: row for row in profile.eta_honesty(estimates)}
    assert (rows[0.1]["at"], rows[0.1]["estimated_left"], rows[0.1]["true_left"]) == (4.0, 300.0,
                                                                                     96.0)
    assert (rows[0.5]["at"], rows[0.5]["estimated_left"], rows[0.5]["true_left"]) == (30.0, 80.0,
                                                                                     70.0)
    assert rows[0.9]["at"] == 60.0 and rows[0.9]["true_left"] == 40.0
    assert profile.eta_honesty([]) == []
