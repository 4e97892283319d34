"""A reduced soak on every backend: hostile and honest runs at once, each with its own marker; no
result may go to the wrong run, no run may see a trace of another, every honest run must succeed.
The full count (10,000 runs and more) is ``python bench/sandbox_soak.py --runs 10000``."""

from __future__ import annotations

import pytest

from tests.sandboxes.soak_support import soak

pytestmark = pytest.mark.slow


def test_mixed_hostile_and_honest_runs_never_cross(sandbox):
    report = soak(sandbox.run, runs=120, limits=sandbox.limits, concurrency=3, seed=13)
    print(report.summary())
    assert report.misattributed == 0, report.summary()
    assert report.traces == 0, report.summary()
    assert report.honest_failures == 0, report.summary()
