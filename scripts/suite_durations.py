"""Each test file's seconds in a whole run of the suite, for the order in which the two pytest
workers take the files (tests/conftest.py, docs/architecture.md "The test suite"):

    python -m pytest -q -n 2 --dist loadfile --junitxml=suite.xml tests
    python scripts/suite_durations.py --junit=suite.xml [--output=tests/durations.json]

Reads the JUnit report pytest wrote (each test's setup, call and teardown seconds) and writes
{file: seconds} with the date and the CPU, the files in descending order of their seconds.
"""
import dataclasses
import datetime
import os
import xml.etree.ElementTree as ElementTree

from models.foundation.cli import option, run_binary
from models.foundation.errors import UserError
from models.foundation.files import write_json
from models.foundation.provenance import machine
from models.foundation.rules import Checked

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclasses.dataclass(frozen=True)
class Config(Checked):
    junit: str = option("", "The JUnit XML report of a whole run of the suite (--junitxml).")
    output: str = option(os.path.join(REPO, "tests", "durations.json"), "Where to write.")


def file_of(classname: str) -> str:
    """The test file (relative to the repository) of a JUnit classname: 'tests.roar.test_train'
    or, for a test in a class, 'tests.roar.test_train.TestThing'."""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        path = "/".join(parts[:end]) + ".py"
        if os.path.isfile(os.path.join(REPO, path)):
            return path
    raise UserError(f"--junit: no test file for the test class {classname!r}")


def file_seconds(report: str) -> dict:
    """{test file: the seconds of its tests}, from the report at `report`."""
    try:
        root = ElementTree.parse(report).getroot()
    except (OSError, ElementTree.ParseError) as error:
        raise UserError(f"--junit {report}: not a readable JUnit report ({error})") from None
    seconds: dict = {}
    for case in root.iter("testcase"):
        # (a module skipped as a whole is a case with no classname, named by its module)
        name = file_of(case.get("classname") or case.get("name") or "")
        try:
            spent = float(case.get("time", 0.0))
        except ValueError:
            raise UserError(f"--junit {report}: the test case {case.get('name')!r} of {name} "
                            f"has no time in seconds ({case.get('time')!r})") from None
        seconds[name] = seconds.get(name, 0.0) + spent
    if not seconds:
        raise UserError(f"--junit {report}: no test case in it")
    return dict(sorted(((name, round(value, 1)) for name, value in seconds.items()),
                       key=lambda item: -item[1]))


def run(config: Config) -> dict:
    if not config.junit:
        raise UserError("--junit: name the JUnit report of a run of the suite")
    seconds = file_seconds(config.junit)
    written = {"measured": f"{datetime.date.today()}, {machine()}: "
                           f"python scripts/suite_durations.py --junit=REPORT",
               "seconds": seconds}
    write_json(config.output, written, indent=1)
    total = sum(seconds.values())
    print(f"{len(seconds)} files, {total:.0f} s of tests; the heaviest: "
          + ", ".join(f"{name} {value:.0f} s" for name, value in list(seconds.items())[:5]))
    print(f"wrote {config.output}")
    return written


if __name__ == "__main__":
    run_binary(Config, run)
