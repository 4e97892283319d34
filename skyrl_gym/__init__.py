"""skyrl_gym: a Gymnasium-style environment hub for reinforcement learning on language models.

>>> import skyrl_gym
>>> env = skyrl_gym.make("gsm8k", extras={"reward_spec": {"ground_truth": "72"}})
>>> env.step("... #### 72")["reward"]
1.0

Importing this package imports no torch, transformers, ray or pandas.
"""

from skyrl_gym import errors, error  # noqa: F401  (``error`` is SkyRL-gym's module name)
from skyrl_gym.core import ConversationType, Env, EnvStepOutput, MessageType, StepOutput
from skyrl_gym.errors import DataError, UnregisteredEnv  # what the docs' error messages name
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
from skyrl_gym.registration import EnvSpec, deregister, make, pprint_registry, register, registry, spec
from skyrl_gym import envs  # noqa: F401,E402  registers the built-in envs (string entry points, nothing heavy)
from skyrl_gym.registration import mark_shipped as _mark_shipped

_mark_shipped()  # a user's register() of one of these ids replaces ours, with a warning
from skyrl_gym import _gymnasium_hook

_gymnasium_hook.install()  # gymnasium.make("skyrl_gym/<id>-v0") once Gymnasium is imported, before or after us

__version__ = "0.5.0"


def check_env(env_or_id, rows=None, **kwargs):
    """Drive an env through rows and adversarial actions and report contract breaches.

    See :func:`skyrl_gym.checker.check_env`.
    """
    from skyrl_gym.checker import check_env as _check_env

    return _check_env(env_or_id, rows, **kwargs)


def __getattr__(name):  # lazy submodules that pull optional dependencies
    if name == "tools":
        import skyrl_gym.tools as tools

        return tools
    raise AttributeError(f"module 'skyrl_gym' has no attribute {name!r}")


__all__ = [
    "Env",
    "BaseTextEnv",
    "StepOutput",
    "EnvStepOutput",
    "BaseTextEnvStepOutput",
    "ConversationType",
    "MessageType",
    "EnvSpec",
    "make",
    "spec",
    "register",
    "deregister",
    "registry",
    "pprint_registry",
    "check_env",
    "DataError",
    "UnregisteredEnv",
    "errors",
    "envs",
]
