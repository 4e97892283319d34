"""Imported by each Ray env worker of the tests (``EnvWorkerPool(imports=[...])``): registers the rollout tests'
envs (``test_countdown_turns``, ``test_failing``, ...) in the actor's process, as a user's package would."""

from tests.adapters.support import register_test_envs

register_test_envs()
