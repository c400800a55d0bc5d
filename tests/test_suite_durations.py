"""scripts/suite_durations.py: each test file's seconds from a JUnit report, longest first, and
the file tests/conftest.py orders the suite by."""
import json
import os

import pytest

from models.foundation.errors import UserError
from scripts import suite_durations
from tests import REPO


def test_seconds_are_summed_per_file_longest_first(tmp_path):
    report = tmp_path / "suite.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.roar.test_train" name="a" time="1.25"/>'
        '<testcase classname="tests.test_readme" name="b" time="2.0"/>'
        '<testcase classname="tests.roar.test_train" name="c" time="1.5"/>'
        # a module skipped as a whole: no classname, named by its module
        '<testcase classname="" name="tests.faithfulness.test_crosscheck" time="0.000"/>'
        '</testsuite></testsuites>')
    found = suite_durations.file_seconds(str(report))
    assert found == {"tests/roar/test_train.py": 2.8, "tests/test_readme.py": 2.0,
                     "tests/faithfulness/test_crosscheck.py": 0.0}
    assert list(found) == ["tests/roar/test_train.py", "tests/test_readme.py",
                           "tests/faithfulness/test_crosscheck.py"]
    report.write_text('<testsuite><testcase classname="tests.test_readme" name="a" time="a while"/>'
                      '</testsuite>')
    with pytest.raises(UserError, match="test case 'a' of tests/test_readme.py has no time"):
        suite_durations.file_seconds(str(report))
    report.write_text('<testsuite><testcase classname="tests.nowhere" name="a"/></testsuite>')
    with pytest.raises(UserError, match="no test file for the test class 'tests.nowhere'"):
        suite_durations.file_seconds(str(report))


def test_the_stored_durations_name_existing_test_files():
    with open(os.path.join(REPO, "tests", "durations.json"), encoding="utf-8") as handle:
        stored = json.load(handle)
    assert stored["measured"].startswith("20") and stored["seconds"]
    assert all(os.path.isfile(os.path.join(REPO, name)) for name in stored["seconds"])
    values = list(stored["seconds"].values())
    assert values == sorted(values, reverse=True)
