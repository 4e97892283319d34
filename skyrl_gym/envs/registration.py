"""SkyRL-gym keeps the registry at ``skyrl_gym.envs.registration``; it lives in ``skyrl_gym.registration``."""

from skyrl_gym.registration import (  # noqa: F401
    EnvCreator,
    EnvSpec,
    deregister,
    load_env_creator,
    make,
    pprint_registry,
    register,
    registry,
    spec,
)
