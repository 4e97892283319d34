"""The core environment contract: ``Env`` and the step output types.

Compatible with SkyRL-gym: an env has ``init(prompt) -> (observation, info)``,
``step(action) -> StepOutput`` and ``close()``; it is a context manager and knows its
``spec`` once built by :func:`skyrl_gym.make`.
"""

from __future__ import annotations

from typing import Any, Dict, Generic, List, Mapping, Optional, Tuple, TypedDict, TypeVar

ObsType = TypeVar("ObsType")
ActType = TypeVar("ActType")

MessageType = Dict[str, Any]
"""One chat message in the OpenAI format: ``{"role": ..., "content": ...}``."""

ConversationType = List[MessageType]


class _StepOutputRequired(TypedDict):
    observations: ConversationType
    reward: float
    done: bool
    metadata: Dict[str, Any]


class StepOutput(_StepOutputRequired, total=False):
    """What ``Env.step`` returns.

    ``observations`` are new chat messages for the model (empty when there are none),
    ``reward`` the reward of this step, ``done`` whether the episode has ended, ``metadata``
    free-form diagnostics (parsed answers, tool errors, reasons for a zero reward), and the
    optional ``postprocessed_action`` the action as the env wants it recorded (e.g. cut after a
    stop tag).
    """

    postprocessed_action: Optional[str]


# SkyRL-gym names this type ``EnvStepOutput`` in ``core``.
EnvStepOutput = StepOutput


class Env(Generic[ObsType, ActType]):
    """Base class of every environment.

    Subclasses implement :meth:`step` and usually :meth:`init`; :meth:`close` releases external
    resources (databases, sandboxes, HTTP sessions) and must be safe to call twice.
    """

    # The skyrl_gym.registration.EnvSpec that built this env (set by make). Typed Any so that the env
    # contract does not import the registry, which imports it.
    spec: Any = None

    # Every ``env_config`` key the env reads, with its default (None where it has none): the trainer, the CLI
    # and serve-env name a key outside it as a mistake ("serch_url"), `skyrl-gym info` lists it, and serve-env
    # takes a client's ceilings from its defaults. None: not declared, so the keys a user sets are not checked.
    config_defaults: Optional[Mapping[str, Any]] = None

    def init(self, prompt: Any = None) -> Tuple[ObsType, Dict[str, Any]]:
        """Start an episode; return the first observation (the prompt for the model) and info."""
        raise NotImplementedError(f"{type(self).__name__} does not implement init()")

    def step(self, action: ActType) -> StepOutput:
        """Apply one action (the model's text) and return observations, reward, done and metadata."""
        raise NotImplementedError(f"{type(self).__name__} does not implement step()")

    async def astep(self, action: ActType) -> StepOutput:
        """``step`` for async callers. Envs that wait on I/O (HTTP, SQLite, sandboxes) override it to await
        without holding a thread; by default the blocking ``step`` runs in a worker thread, so callers always
        ``await env.astep(action)`` whatever the env."""
        import asyncio  # here, not at the top: `import skyrl_gym` stays light

        return await asyncio.to_thread(self.step, action)

    @property
    def has_native_astep(self) -> bool:
        """True when the env's class overrides :meth:`astep` (it awaits its I/O on the caller's loop)."""
        return type(self.unwrapped).astep is not Env.astep

    def close(self) -> None:
        """Release resources. Calling it on a closed env has no effect."""

    @property
    def unwrapped(self) -> "Env[ObsType, ActType]":
        return self

    def __str__(self) -> str:
        env_id = self.spec.id if self.spec is not None else None
        return f"{type(self).__name__}<{env_id}>" if env_id else f"Env({type(self).__name__})"

    def __enter__(self) -> "Env[ObsType, ActType]":
        return self

    def __exit__(self, *exc_info: Any) -> bool:
        self.close()
        return False
