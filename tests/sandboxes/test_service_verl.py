"""veRL's own SandboxFusion client (``verl.utils.reward_score.sandbox_fusion``) against ``skygym-sandboxes serve``.

Runs in the ``verl`` test session (the verl package pins its own transformers)."""

from __future__ import annotations

import pytest

from skygym_sandboxes import Limits
from tests.sandboxes.remote_support import start_server

pytestmark = pytest.mark.verl
sandbox_fusion = pytest.importorskip(
    "verl.utils.reward_score.sandbox_fusion.utils", reason="verl is not installed in this environment"
)


@pytest.fixture(scope="module")
def url():
    box = start_server(Limits(wall_s=10, cpu_s=10), max_concurrency=2)
    yield f"{box.url}/run_code"
    box.close()


def test_call_sandbox_api(url):
    response, error = sandbox_fusion.call_sandbox_api(url, "print(input()[::-1])", "abc", 10, 10, 1024)
    assert error is None and response["status"] == "Success"
    assert response["run_result"]["stdout"] == "cba\n" and response["run_result"]["return_code"] == 0


def test_check_correctness_verdicts(url):
    in_outs = {"inputs": ["1 2\n", "3 4\n"], "outputs": ["3\n", "7\n"]}
    results, metadata = sandbox_fusion.check_correctness(
        url, in_outs, "a, b = map(int, input().split())\nprint(a + b)", timeout=5
    )
    assert results == [True, True] and [m["status"] for m in metadata] == ["success", "success"]
    wrong, _ = sandbox_fusion.check_correctness(url, in_outs, "print(0)", timeout=5)
    assert wrong == [False, False]
    hung, metadata = sandbox_fusion.check_correctness(url, in_outs, "while True:\n    pass", timeout=1)
    assert hung == [-3, -3] and metadata[0]["status"] == "timeout"
    crashed, metadata = sandbox_fusion.check_correctness(url, in_outs, "raise ValueError", timeout=5)
    assert crashed == [-2, -2] and metadata[0]["status"] == "runtime_error"
