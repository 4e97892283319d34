"""`skyrl-gym audit swe` on a freshly built instance: the gold patch earns 1.0, and every hack of the swe profile
(the historical `git apply -R` of an answer left on disk, the answer from git history, deleted or emptied tests, a
conftest that passes every test, and ten forgeries from library code that grading's planted tests catch) earns no
more than an unchanged checkout. Here, beside the other Docker tests, so
it shares their engine and build (tests/swe_fixtures.py)."""

from __future__ import annotations

import pytest

from skyrl_gym.audit import FALSE_POSITIVE, audit_env
from skyrl_gym.envs.swe.audit import LIBRARY_FORGERIES
from skyrl_gym.envs.swe.dataset import instance_row

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_swe_passes_its_audit(swe_instances):
    report = audit_env("swe", [instance_row(swe_instances[0], None)], max_rows=1, budget_s=900.0)
    assert report.ok, report.table()
    assert any(case.kind == "golden" and case.got == 1.0 for case in report.cases), report.table()
    historical = [case for case in report.cases if "git apply -R" in case.name]
    assert historical and all(case.verdict != FALSE_POSITIVE for case in historical), report.table()
    hacks = {case.name: case.got for case in report.cases if case.kind == "hack"}
    forgeries = ["test functions stubbed from library code", "pytest's report factory wrapped from library code",
                 "the reporter's nonce read from its closure", *LIBRARY_FORGERIES]
    assert [hacks.get(name) for name in forgeries] == [0.0] * len(forgeries), report.table()
