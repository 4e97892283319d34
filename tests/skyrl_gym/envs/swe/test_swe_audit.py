"""`skyrl-gym audit swe` on a freshly built instance: the gold patch earns 1.0, and the swe profile's hacks (the
historical `git apply -R` of an answer left on disk, the answer from git history, deleted or emptied tests, a conftest
that passes every test, a tool-call flood, and two of its forgeries from library code that grading's planted tests
catch) earn no more than an unchanged checkout. Here, beside the other Docker tests, so it shares their engine and
build (tests/swe_fixtures.py).

Every forgery of the profile is played against grading in test_swe_docker.py, each with the negative control that the
hidden tests alone took it for resolved; the audit plays two of them, for the path from the agent's actions through the env
to grading (playing all of them again here cost about a minute of CI)."""

from __future__ import annotations

import pytest

from skyrl_gym.audit import FALSE_POSITIVE, audit_env
from skyrl_gym.envs.swe.audit import LIBRARY_FORGERIES
from skyrl_gym.envs.swe.dataset import instance_row

pytestmark = [pytest.mark.docker, pytest.mark.slow]


FORGERIES_PLAYED = ("test functions stubbed from library code", "results equal to anything")


def test_swe_passes_its_audit(swe_instances):
    from skyrl_gym.envs.swe.audit import SWE_HACKS

    forgeries = ["test functions stubbed from library code", "pytest's report factory wrapped from library code",
                 "the reporter's nonce read from its closure", *LIBRARY_FORGERIES]
    assert set(FORGERIES_PLAYED) <= set(forgeries) <= {hack.name for hack in SWE_HACKS}
    played = [hack.name for hack in SWE_HACKS if hack.name not in forgeries or hack.name in FORGERIES_PLAYED]
    report = audit_env("swe", [instance_row(swe_instances[0], None)], max_rows=1, budget_s=900.0, hacks=played)
    assert report.ok, report.table()
    assert any(case.kind == "golden" and case.got == 1.0 for case in report.cases), report.table()
    historical = [case for case in report.cases if "git apply -R" in case.name]
    assert historical and all(case.verdict != FALSE_POSITIVE for case in historical), report.table()
    hacks = {case.name: case.got for case in report.cases if case.kind == "hack"}
    assert set(hacks) == set(played) and len(played) == 8, report.table()
    assert [hacks[name] for name in FORGERIES_PLAYED] == [0.0, 0.0], report.table()
