"""Types shared by the rollout loop, the inference engines and every trainer adapter.

Field names follow SkyRL's ``GeneratorInput`` / ``GeneratorOutput`` so that code written for
SkyRL-train reads these unchanged.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Protocol, TypedDict, runtime_checkable

ConversationType = List[Dict[str, Any]]


class SamplingParams(TypedDict, total=False):
    max_generate_length: int
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    stop: List[str]
    logprobs: bool
    seed: int
    # Token ids that end a generation besides the tokenizer's EOS.
    stop_token_ids: List[int]


class TrajectoryID(TypedDict):
    instance_id: str
    repetition_id: int


class GeneratorInput(TypedDict, total=False):
    prompts: List[ConversationType]
    env_classes: List[str]
    env_extras: List[Dict[str, Any]]
    sampling_params: Optional[SamplingParams]
    trajectory_ids: Optional[List[TrajectoryID]]
    batch_metadata: Optional[Dict[str, Any]]


class GeneratorOutput(TypedDict, total=False):
    prompt_token_ids: List[List[int]]
    response_ids: List[List[int]]
    # A float per trajectory, or per-token rewards (reward of each assistant turn on its last token).
    rewards: List[Any]
    loss_masks: List[List[int]]
    stop_reasons: List[str]
    rollout_logprobs: Optional[List[List[float]]]
    rollout_metrics: Dict[str, Any]
    trajectory_ids: List[TrajectoryID]
    env_metrics: List[Dict[str, Any]]
    is_last_step: Optional[List[bool]]
    # Additions of this project (optional for consumers):
    # the scalar return of each trajectory (sum of its turn rewards, after zero_reward_on_non_stop).
    trajectory_rewards: List[float]
    # number of assistant turns of each trajectory (for step-wise output: of the trajectory the step belongs to).
    num_turns: List[int]
    # None, or the error that ended a trajectory early (an env that raised), e.g. "ValueError: bad action".
    errors: List[Optional[str]]
    # Seconds per trajectory (SkyRL's names): {"llm": [...] in engine calls, "env": [...] in env calls,
    # "total": [...] end to end}; trajectory_generation_times repeats "total".
    trajectory_time_splits: Dict[str, List[float]]
    trajectory_generation_times: List[float]


class InferenceEngineOutput(TypedDict, total=False):
    response_ids: List[List[int]]
    responses: List[str]
    stop_reasons: List[str]  # "stop" | "length" | "abort"
    # Log-probability of each response token under the temperature-scaled distribution the token was
    # sampled from (before top-k/top-p filtering); None unless sampling_params["logprobs"] is true.
    response_logprobs: Optional[List[List[float]]]


@runtime_checkable
class InferenceEngine(Protocol):
    """An engine that turns prompt token ids into response token ids (token-in/token-out).

    Every engine (HF, vLLM, SGLang, remote, scripted, and :class:`~skygym_adapters.engines.client.EngineClient`
    over several of them) implements all of it; :class:`~skygym_adapters.engines.base.BaseInferenceEngine` has
    the defaults. Callers never probe for methods.

    ``messages`` (the conversation of each prompt) is used by engines that template by themselves
    (``needs_messages``: an OpenAI chat-completions server) and ignored by the others. ``session_ids`` (one per
    prompt, e.g. a trajectory id) keep a conversation on one engine where several serve; ``finish_session``
    forgets it.
    """

    needs_messages: bool

    async def generate(
        self,
        prompt_token_ids: List[List[int]],
        sampling_params: Optional[SamplingParams] = None,
        *,
        messages: Optional[List[ConversationType]] = None,
        session_ids: Optional[List[Optional[str]]] = None,
    ) -> InferenceEngineOutput: ...

    def finish_session(self, session_id: str) -> None: ...

    async def update_weights(self, named_tensors: Any) -> None: ...

    async def sleep(self) -> None: ...

    async def wake_up(self) -> None: ...

    async def aclose(self) -> None: ...

    def close(self) -> None: ...
