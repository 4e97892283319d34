"""Imported by each Ray env worker of the tests (``EnvWorkerPool(imports=[...])``): registers the rollout tests'
envs (``test_countdown_turns``, ``test_failing``, ...) in the actor's process, as a user's package would."""

from tests.adapters.support import register_test_envs

register_test_envs()

# (env id, row extras, scripted actions): multi-turn episodes with per-turn rewards, played locally and in actors.
CASES = [
    (
        "gsm8k_multi_turn",
        {"reward_spec": {"method": "rule", "ground_truth": "72"}, "max_turns": 3},
        ["I think it is 70", "#### 71", "#### 72"],
    ),
    (
        "gsm8k_multi_turn",
        {"reward_spec": {"method": "rule", "ground_truth": "18"}, "max_turns": 2},
        ["#### 17", "no idea"],
    ),
    (
        "multiply",
        {"reward_spec": {"method": "rule", "ground_truth": "42"}, "max_turns": 3},
        ["6 times 7", "\\boxed{41}", "\\boxed{42}"],
    ),
    (
        "multiply",
        {"reward_spec": {"method": "rule", "ground_truth": "12"}, "max_turns": 2},
        ["\\boxed{11}", "\\boxed{13}"],
    ),
    ("test_countdown_turns", {"turns": 3}, ["a", "b", "c"]),
]
