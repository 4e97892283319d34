"""``reward_spec.method == "judge"``: any env's episode scored by an LLM judge instead of its own rule.

:func:`skyrl_gym.make` wraps the env it builds in :class:`JudgeRewardEnv` when the row asks for it::

    {"env_class": "gsm8k", "prompt": [...],
     "reward_spec": {"method": "judge", "ground_truth": "72",
                     "rubric": "1 if the final answer is 72, 0.5 if the method is right but the sum is off, else 0",
                     "scale": 1, "judge_input": "final"}}

The env runs as usual (its observations, turns and ``done`` are untouched). When it says ``done``, the judge
scores the episode: the final action (``judge_input: "final"``, the default) or every action and observation
(``"transcript"``), against ``ground_truth`` with ``rubric``. That step's reward is the judge's score; earlier
steps get 0, so an episode's return is the judge's score. The env's own reward is kept in
``metadata["env_reward"]`` and the verdict in ``metadata["judge"]``. A judge that cannot be reached, or whose
answer cannot be read, gives reward 0 with ``metadata["judge_error"]`` and counts in the ``judge_error`` metric:
a batch never stops for it.
"""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List, Mapping, Optional, Tuple

from skyrl_gym.core import Env, StepOutput
from skyrl_gym.errors import DataError, MissingRewardSpec
from skyrl_gym.rewards.judge import (
    ROW_FORBIDDEN_KEYS,
    JudgeEndpoint,
    JudgeRequest,
    Verdict,
    client_for,
    render_conversation,
)

JUDGE_METHOD = "judge"
JUDGE_INPUTS = ("final", "transcript")

# Attributes that belong to the wrapper; every other attribute is read from and written to the wrapped env, so
# that the episode driver's ``env.max_turns = n`` reaches the env that counts turns.
_OWN = frozenset(
    {
        "env",
        "spec",
        "client",
        "reference",
        "rubric",
        "scale",
        "judge_input",
        "_prompt",
        "_transcript",
        "_verdict",
    }
)


def wants_judge(extras: Any) -> bool:
    """True when the row's ``reward_spec.method`` is ``"judge"``."""
    if type(extras) is not dict and not isinstance(extras, Mapping):
        return False
    spec = extras.get("reward_spec")
    return isinstance(spec, Mapping) and spec.get("method") == JUDGE_METHOD


class JudgeRewardEnv(Env):
    """Wraps an env; the judge gives the reward of the step that ends the episode."""

    def __init__(self, env: Env, env_config: Any = None, extras: Optional[Mapping[str, Any]] = None) -> None:
        object.__setattr__(self, "env", env)
        reward_spec = dict((extras or {}).get("reward_spec") or {})
        endpoint_keys = sorted(ROW_FORBIDDEN_KEYS.intersection(reward_spec))
        if endpoint_keys:  # the endpoint and its key are the operator's: a row never points the judge elsewhere
            raise DataError(
                f"reward_spec may not set {endpoint_keys}: the judge's endpoint, model and key come from the "
                f"operator (env_config.judge or the SKYRL_GYM_JUDGE_* variables), not from a row"
            )
        reference, rubric = reward_spec.get("ground_truth"), reward_spec.get("rubric")
        if reference is None and not rubric:
            raise MissingRewardSpec(
                "reward_spec.method 'judge' needs reward_spec.ground_truth (the reference) or reward_spec.rubric"
            )
        if rubric is not None and not isinstance(rubric, str):
            raise DataError(f"reward_spec.rubric must be a string, got {type(rubric).__name__}")
        judge_input = reward_spec.get("judge_input", "final")
        if judge_input not in JUDGE_INPUTS:
            raise DataError(
                f"reward_spec.judge_input must be one of {list(JUDGE_INPUTS)}, got {judge_input!r}"
            )
        try:
            scale = float(reward_spec.get("scale", 1.0))
        except (TypeError, ValueError):
            raise DataError(f"reward_spec.scale must be a number, got {reward_spec.get('scale')!r}") from None
        if not scale > 0:
            raise DataError(f"reward_spec.scale must be > 0, got {scale}")
        values = {
            "spec": getattr(env, "spec", None),
            "client": client_for(JudgeEndpoint.from_config(env_config)),  # a JudgeError names what is missing
            "reference": reference,
            "rubric": rubric,
            "scale": scale,
            "judge_input": judge_input,
            "_prompt": [],
            "_transcript": [],
            "_verdict": None,
        }
        for name, value in values.items():
            object.__setattr__(self, name, value)

    # Everything the wrapper does not define is the wrapped env's (max_turns, turns, tool_schemas, ...).
    def __getattr__(self, name: str) -> Any:
        if name == "env":  # not set yet (a failing __init__): no recursion
            raise AttributeError(name)
        return getattr(self.env, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _OWN:
            object.__setattr__(self, name, value)
        else:
            setattr(self.env, name, value)

    @property
    def unwrapped(self) -> Env:
        return self.env.unwrapped

    @property
    def has_native_astep(self) -> bool:
        return True  # astep awaits the judge on a worker thread, never blocking the caller's loop

    def __str__(self) -> str:
        return f"JudgeRewardEnv<{self.env}>"

    # ----- the episode --------------------------------------------------------------------------------------------
    def init(self, prompt: Any = None) -> Tuple[Any, Dict[str, Any]]:
        observation, info = self.env.init(prompt)
        self._prompt = list(observation) if isinstance(observation, list) else list(prompt or [])
        self._transcript = []
        self._verdict = None
        return observation, info

    def _request(self, action: Any, output: Mapping[str, Any]) -> JudgeRequest:
        question = render_conversation(self._prompt)
        if self.judge_input == "transcript":
            response = render_conversation(self._transcript, limit=self.client.endpoint.max_response_chars)
        else:
            response = action if isinstance(action, str) else ("" if action is None else str(action))
        return JudgeRequest(response, self.reference, self.rubric, question)

    def _record(self, action: Any, output: Mapping[str, Any]) -> None:
        self._transcript.append(
            {"role": "assistant", "content": action if isinstance(action, str) else str(action)}
        )
        for message in output.get("observations") or []:
            if isinstance(message, Mapping):
                self._transcript.append(dict(message))

    def _with_reward(self, output: Any, verdict: Optional[Verdict]) -> StepOutput:
        if not isinstance(output, Mapping):
            return output  # the driver reports a malformed step output; the judge has nothing to add
        result: Dict[str, Any] = dict(output)
        metadata = dict(output.get("metadata") or {})
        metadata["env_reward"] = output.get("reward")
        if verdict is None:
            result["reward"] = 0.0
        else:
            metadata["judge"] = verdict.to_metadata()
            if verdict.ok:
                result["reward"] = float(verdict.score)  # type: ignore[arg-type]
            else:
                result["reward"] = 0.0
                metadata["judge_error"] = verdict.error
        result["metadata"] = metadata
        return result  # type: ignore[return-value]

    def step(self, action: Any) -> StepOutput:
        output = self.env.step(action)
        if not isinstance(output, Mapping):
            return output
        self._record(action, output)
        verdict = None
        if output.get("done"):
            verdict = self._verdict = self.client.judge(self._request(action, output), self.scale)
        return self._with_reward(output, verdict)

    async def astep(self, action: Any) -> StepOutput:
        """The wrapped env's step (its own ``astep``, else its blocking ``step`` on a worker thread), then the
        judge on a worker thread: the caller's event loop (serve-env's, the episode driver's) is never blocked."""
        if self.env.has_native_astep:
            output = await self.env.astep(action)
        else:  # a blocking step: on a worker thread, so the caller's loop (serve-env's, a driver's) serves on
            output = await asyncio.to_thread(self.env.step, action)
        if not isinstance(output, Mapping):
            return output
        self._record(action, output)
        verdict = None
        if output.get("done"):
            verdict = self._verdict = await self.client.ajudge(self._request(action, output), self.scale)
        return self._with_reward(output, verdict)

    def get_metrics(self) -> Dict[str, Any]:
        get_metrics = getattr(self.env, "get_metrics", None)
        metrics = dict(get_metrics() or {}) if callable(get_metrics) else {}
        verdict = self._verdict
        if verdict is not None:
            metrics["judge_error"] = 0 if verdict.ok else 1
            metrics["judge_cached"] = int(verdict.cached)
            if verdict.ok:
                metrics["judge_score"] = verdict.score
        return metrics

    def aggregate_metrics(self, metrics: List[Dict[str, Any]]) -> Dict[str, Any]:
        """The wrapped env's aggregate of its own metrics, plus :func:`aggregate_judge_metrics`."""
        own = [{k: v for k, v in m.items() if not k.startswith("judge_")} for m in metrics]
        return {**dict(self.env.aggregate_metrics(own) or {}), **aggregate_judge_metrics(metrics)}

    def close(self) -> None:
        self.env.close()


def aggregate_judge_metrics(metrics: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The judge's metrics over episodes: ``judge_errors`` (a count), ``judge_error_rate``, ``judge_score`` and
    ``judge_cache_hit_rate`` (means over the episodes that have them); empty when no episode was judged."""

    def values(key: str) -> List[float]:
        return [float(m[key]) for m in metrics if isinstance(m.get(key), (int, float))]

    result: Dict[str, Any] = {}
    errors, scores, cached = values("judge_error"), values("judge_score"), values("judge_cached")
    if errors:
        result["judge_errors"] = int(sum(errors))
        result["judge_error_rate"] = sum(errors) / len(errors)
    if scores:
        result["judge_score"] = sum(scores) / len(scores)
    if cached:
        result["judge_cache_hit_rate"] = sum(cached) / len(cached)
    return result


def with_judge_reward(env: Env, env_config: Any, extras: Any) -> Env:
    """``env`` wrapped in :class:`JudgeRewardEnv` when the row asks for a judge, else ``env`` itself."""
    if not wants_judge(extras):
        return env
    try:
        return JudgeRewardEnv(env, env_config, extras)
    except BaseException:
        env.close()  # the wrapped env owns resources the caller will never see
        raise


__all__ = ["JUDGE_METHOD", "JudgeRewardEnv", "aggregate_judge_metrics", "wants_judge", "with_judge_reward"]
