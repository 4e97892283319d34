"""The SWE session fixtures (a real Docker engine, instances built by `skyrl-gym swe build`) for the agent layer's
SWE task tests; they start nothing until a test asks for them."""

from tests.skyrl_gym.envs.swe.conftest import (  # noqa: F401
    docker_client_for_tests,
    swe_built,
    swe_docker,
    swe_instances,
)
