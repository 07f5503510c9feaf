"""Runs one pytest file for ctest: exit 0 when its tests passed, 77 (ctest's "skipped") when
every test was skipped (no torch here, no O_DIRECT, no network for pip...), 1 otherwise. A
file of which some tests ran and some were skipped passes; pytest prints why each was skipped.
"""
import sys

import pytest


class _Outcomes:
    def __init__(self):
        self.passed = 0
        self.skipped = 0
        self.failed = 0

    def pytest_runtest_logreport(self, report):
        if report.skipped:
            self.skipped += 1 if report.when in ("setup", "call") else 0
        elif report.failed:
            self.failed += 1
        elif report.when == "call" and report.passed:
            self.passed += 1

    def pytest_collectreport(self, report):
        if report.skipped:  # pytest.importorskip at module level
            self.skipped += 1
        elif report.failed:
            self.failed += 1


def main():
    outcomes = _Outcomes()
    rc = pytest.main(["-q", "-rs", "-p", "no:cacheprovider", *sys.argv[1:]], plugins=[outcomes])
    if rc == 0 and outcomes.passed == 0 and outcomes.skipped > 0:
        return 77
    if rc == pytest.ExitCode.NO_TESTS_COLLECTED and outcomes.skipped > 0 and outcomes.failed == 0:
        return 77
    return int(rc)


if __name__ == "__main__":
    sys.exit(main())
