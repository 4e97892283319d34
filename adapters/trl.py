"""TRL adapter: ``skyrl_gym`` envs as reward functions and multi-turn rollouts for ``GRPOTrainer``.

Single-turn training needs one line::

    from skygym_adapters.trl import env_reward
    trainer = GRPOTrainer(model=..., reward_funcs=[env_reward("gsm8k")], train_dataset=rows_to_dataset(rows))

The reward function builds the env of each row (the ``env_id`` given, or the row's ``env_class``
column) with the row's columns as ``extras`` (``reward_spec`` with the ground truth, ``extra_info``, ...),
steps it once with the completion and returns the env's reward.

Multi-turn episodes go through TRL's ``rollout_func`` hook::

    trainer = GRPOTrainer(model=..., reward_funcs=[episode_reward], train_dataset=dataset,
                          rollout_func=env_rollout_func(rows, max_turns=3))

:func:`env_rollout_func` runs this project's rollout loop (:mod:`skygym_adapters.rollout`) with the policy
being trained as the engine: token ids in and out, observation tokens from the chat template with
``env_mask`` 0 (TRL excludes them from the loss), and the sampled tokens' logprobs. TRL gives a
``rollout_func`` only the prompts, so it finds each prompt's row (ground truth, env) in the rows it
was built with. The episode reward reaches the reward functions as the ``env_reward`` column, read
by :func:`episode_reward`.

An agent of the agent layer (:mod:`skygym_adapters.agents`: a task, an agent, its tools, from an agent YAML) can
play the episodes instead::

    trainer = GRPOTrainer(model=..., reward_funcs=[episode_reward], train_dataset=dataset,
                          rollout_func=agent_rollout_func("agent.yaml", rows))

:func:`agent_rollout_func` runs ONE trajectory of an :class:`~skygym_adapters.agents.AgentRunner` per prompt (TRL
already repeats each prompt ``num_generations`` times) with the policy being trained as the engine
(``infer_backend: skyrl-train``); ``env_mask`` is the runner's loss mask (observation tokens 0, and all 0 for
trajectories the agent layer does not train on), ``env_reward`` the task's reward, ``agent_finish_reason`` why
each trajectory stopped.

This module imports TRL, torch and transformers only inside the functions that need them.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import skyrl_gym
from skyrl_gym.data import row_extras, to_plain
from skyrl_gym.episode import EpisodeEnd, ascore_response, run_sync
from skyrl_gym.errors import DataError, UnregisteredEnv
from skyrl_gym.registration import env_config_for

logger = logging.getLogger(__name__)

# Keyword arguments TRL passes to reward functions that are not dataset columns.
_TRL_REWARD_KWARGS = frozenset(
    {"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric", "environments"}
)
_NOT_EXTRAS = frozenset({"prompt", "completion", "env_class"})
EPISODE_REWARD_COLUMN = "env_reward"
EPISODE_TURNS_COLUMN = "env_turns"


def completion_text(completion: Any) -> str:
    """The text of a TRL completion: a string, or a list of chat messages (their contents joined)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence):
        parts = []
        for message in completion:
            content = message.get("content") if isinstance(message, Mapping) else message
            if isinstance(content, list):  # typed content blocks
                content = "".join(block.get("text", "") for block in content if isinstance(block, Mapping))
            parts.append(content or "")
        return "".join(parts)
    raise TypeError(f"a completion must be a string or a list of messages, got {type(completion).__name__}")


def _row_columns(kwargs: Mapping[str, Any], index: int) -> Dict[str, Any]:
    return {
        key: values[index]
        for key, values in kwargs.items()
        if key not in _TRL_REWARD_KWARGS and isinstance(values, (list, tuple)) and index < len(values)
    }


def _extras_for(columns: Mapping[str, Any], index: int, env_id: str) -> Dict[str, Any]:
    extras = {key: value for key, value in columns.items() if key not in _NOT_EXTRAS}
    spec = extras.get("reward_spec")
    if spec is None and "ground_truth" in extras:  # a flat dataset: a ground_truth column
        extras["reward_spec"] = {"method": "rule", "ground_truth": extras.pop("ground_truth")}
    elif spec is None:
        raise DataError(
            f"env_reward({env_id!r}): dataset row {index} has no 'reward_spec' column (a dict with 'ground_truth') "
            f"and no 'ground_truth' column; columns seen: {sorted(columns)}"
        )
    return extras


def env_reward(
    env_id: Optional[str] = None,
    env_config: Any = None,
    env_configs: Optional[Mapping[str, Any]] = None,
) -> Callable[..., List[Optional[float]]]:
    """A ``GRPOTrainer`` reward function that scores each completion with one step of a ``skyrl_gym`` env.

    ``env_id`` fixes the env; None uses each row's ``env_class`` column. ``env_config`` (or ``env_configs``
    per env id) is passed to ``skyrl_gym.make``. A row the env cannot read (no ground truth) raises
    :class:`DataError` naming the row; an env that raises while scoring yields ``None`` for that completion
    (TRL leaves it out of the reward) and a warning, so one bad sample does not stop training.
    """
    if env_id is not None:
        skyrl_gym.spec(env_id)  # unknown ids fail here, with the registry's suggestion, not mid-training

    def reward(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> List[Optional[float]]:
        episodes = []
        for i, completion in enumerate(completions):
            columns = _row_columns(kwargs, i)
            row_env = env_id or columns.get("env_class")
            if not row_env:
                raise DataError(f"env_reward(): dataset row {i} has no 'env_class' column; pass env_reward('<env id>')")
            extras = _extras_for(columns, i, row_env)
            config = env_config if env_config is not None else env_config_for(dict(env_configs or {}), row_env)
            prompt = prompts[i] if isinstance(prompts[i], list) else [{"role": "user", "content": str(prompts[i])}]
            # One turn: the completion TRL generated, scored by the env (the episode stops after it).
            episodes.append((row_env, prompt, completion_text(completion), config, extras))
        # coroutines made only once every row has been read: a bad row raises with none left unawaited
        results = run_sync(_gather([ascore_response(*episode) for episode in episodes]))
        rewards: List[Optional[float]] = []
        for i, episode in enumerate(results):
            if isinstance(episode.exception, DataError):
                raise episode.exception  # a row the env cannot read: fix the data, not one sample
            if episode.end is EpisodeEnd.ERROR or not episode.steps:
                logger.warning("env %r raised while scoring completion %d: %s", episode.env_class, i, episode.error)
                rewards.append(None)
            else:
                rewards.append(episode.steps[0].reward)
        return rewards

    reward.__name__ = f"{env_id or 'skyrl_gym'}_reward"
    reward.__qualname__ = reward.__name__
    return reward


async def _gather(coroutines: List[Any]) -> List[Any]:
    return list(await asyncio.gather(*coroutines))


def episode_reward(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> List[Optional[float]]:
    """The episode reward of each completion rolled out by :func:`env_rollout_func` (its ``env_reward`` column)."""
    values = kwargs.get(EPISODE_REWARD_COLUMN)
    if values is None:
        raise DataError(
            "episode_reward needs the 'env_reward' values that env_rollout_func returns; "
            "pass rollout_func=env_rollout_func(rows, ...) to GRPOTrainer"
        )
    return [None if value is None else float(value) for value in values]


def rows_to_dataset(rows: Iterable[Mapping[str, Any]]) -> Any:
    """A ``datasets.Dataset`` of dataset rows: TRL reads ``prompt``; the other columns reach reward functions."""
    from datasets import Dataset

    from skyrl_gym.data import load_rows

    return Dataset.from_list([dict(row) for row in load_rows(list(rows))])


def prompt_key(prompt: Any) -> str:
    """A key for a prompt that survives a trip through ``datasets`` (which fills absent message keys with None)."""
    if isinstance(prompt, str):
        return json.dumps(prompt)
    messages = [{k: v for k, v in dict(m).items() if v is not None} for m in prompt]
    return json.dumps(messages, sort_keys=True, ensure_ascii=False)


def _prompt_table(
    rows: Iterable[Mapping[str, Any]], env_id: Optional[str], what: str, require_env_class: bool = True
) -> Dict[str, Dict[str, Any]]:
    """Rows by :func:`prompt_key`: TRL hands a ``rollout_func`` only the prompts."""
    if env_id is not None:
        skyrl_gym.spec(env_id)  # unknown ids fail here, with the registry's suggestion, not mid-training
    table: Dict[str, Tuple[int, Dict[str, Any]]] = {}
    registered = set()
    for index, row in enumerate(rows):
        row = dict(row)
        if env_id is not None:
            row["env_class"] = env_id
        if require_env_class and not row.get("env_class"):
            raise DataError(f"{what}: row {index} has no 'env_class' (or pass env_id=...)")
        if require_env_class and not isinstance(row["env_class"], str):
            raise DataError(f"{what}: row {index}'s env_class must be an env id, got {row['env_class']!r:.80}")
        if require_env_class and row["env_class"] not in registered:  # agent rows may name a task instead
            try:
                skyrl_gym.spec(row["env_class"])
            except UnregisteredEnv as exc:
                raise DataError(f"{what}: row {index}'s env_class: {exc}") from None
            registered.add(row["env_class"])
        key = prompt_key(row["prompt"])
        if key in table:
            first, known = table[key]
            # an env reads no data_source; an agent's task may grade by it
            ignored = _ROW_IDS + (("data_source",) if require_env_class else ())
            differ = _differences(_what_plays(known, ignored), _what_plays(row, ignored))
            if differ:
                shown = "; ".join(f"{path}: {a:.60} / {b:.60}" for path, a, b in differ[:3])
                raise DataError(
                    f"{what}: row {index} has the same prompt as row {first} but another "
                    f"{', '.join(path for path, _, _ in differ)} ({shown}); TRL gives rollout functions only the "
                    "prompt, so one prompt must stand for one row (drop the duplicates, or make their prompts differ)"
                )
            continue
        table[key] = (index, row)
    if not table:
        raise DataError(f"{what}: no rows given")
    return {key: row for key, (_, row) in table.items()}


_ROW_IDS = ("index", "split", "id", "uid")  # the datasets' bookkeeping; no env reads them


def _what_plays(row: Mapping[str, Any], ignored: Sequence[str]) -> Dict[str, Any]:
    """The columns that make a row's episode and its pay: its env and extras, less ``ignored`` ones (at the top and
    in ``extra_info``), as plain values (pandas gives numpy arrays for lists)."""
    columns = {k: v for k, v in to_plain(row_extras(row)).items() if k not in ignored}
    columns["env_class"] = row.get("env_class")
    if isinstance(columns.get("extra_info"), Mapping):
        columns["extra_info"] = {k: v for k, v in columns["extra_info"].items() if k not in ignored}
    return columns


def _differences(a: Mapping[str, Any], b: Mapping[str, Any], prefix: str = "") -> List[Tuple[str, str, str]]:
    """(dotted key, a's value, b's value) wherever two rows' columns differ, values as canonical JSON (pandas gives
    NaN for a missing value, and NaN is not equal to itself)."""
    found = []
    for key in sorted({*a, *b}):
        left, right = a.get(key), b.get(key)
        if isinstance(left, Mapping) and isinstance(right, Mapping):
            found += _differences(left, right, f"{prefix}{key}.")
            continue
        left_json, right_json = (json.dumps(v, sort_keys=True, default=repr) for v in (left, right))
        if left_json != right_json:
            found.append((f"{prefix}{key}", left_json, right_json))
    return found


def _rows_of(table: Mapping[str, Dict[str, Any]], prompts: List[Any], what: str) -> List[Dict[str, Any]]:
    batch_rows = []
    for i, prompt in enumerate(prompts):
        row = table.get(prompt_key(prompt))
        if row is None:
            raise DataError(f"{what}: prompt {i} is not among the rows the rollout function was built with")
        batch_rows.append(row)
    return batch_rows


def _trl_sampling(trainer: Any, max_tokens: int, temperature: Optional[float]) -> Dict[str, Any]:
    """The trainer's sampling settings as this project's sampling params (logprobs always: TRL wants them)."""
    args = trainer.args
    sampling: Dict[str, Any] = {
        "max_generate_length": max_tokens,
        "temperature": float(temperature if temperature is not None else args.temperature),
        "logprobs": True,
    }
    if getattr(args, "top_p", None) is not None:
        sampling["top_p"] = float(args.top_p)
    if getattr(args, "top_k", None):
        sampling["top_k"] = int(args.top_k)
    return sampling


def rollout_episodes(
    rows: Sequence[Mapping[str, Any]],
    engine: Any,
    tokenizer: Any,
    max_turns: int,
    sampling_params: Mapping[str, Any],
    env_configs: Optional[Mapping[str, Any]] = None,
) -> Dict[str, List[Any]]:
    """One episode per row with ``engine``, in the shape TRL wants back from a ``rollout_func``.

    ``prompt_ids``, ``completion_ids`` (every turn and the observations between them), ``logprobs`` (0 on
    observation tokens), ``env_mask`` (1 model token, 0 env token), and the columns ``env_reward`` (the
    episode's total reward) and ``env_turns`` that reach the reward functions.
    """
    from skygym_adapters.rollout import RolloutConfig, RolloutGenerator

    generator = RolloutGenerator(
        engine,
        tokenizer,
        RolloutConfig(max_turns=max_turns, sampling_params=dict(sampling_params), env_configs=dict(env_configs or {})),
    )
    try:
        trajectories = run_sync(generator.run_rows([dict(row) for row in rows]))
    finally:
        generator.close()
    for trajectory in trajectories:
        if trajectory.error:
            logger.warning("episode of env %r ended with an error: %s", trajectory.env_class, trajectory.error)
    return {
        "prompt_ids": [list(t.prompt_ids) for t in trajectories],
        "completion_ids": [t.response_ids() for t in trajectories],
        "logprobs": [t.response_logprobs() or [0.0] * len(t.response_ids()) for t in trajectories],
        "env_mask": [t.response_loss_mask() for t in trajectories],
        EPISODE_REWARD_COLUMN: [t.total_reward for t in trajectories],
        EPISODE_TURNS_COLUMN: [len(t.turns) for t in trajectories],
    }


def env_rollout_func(
    rows: Iterable[Mapping[str, Any]],
    max_turns: int = 3,
    max_tokens_per_turn: Optional[int] = None,
    env_id: Optional[str] = None,
    env_configs: Optional[Mapping[str, Any]] = None,
    temperature: Optional[float] = None,
) -> Callable[[List[Any], Any], Dict[str, List[Any]]]:
    """A TRL ``rollout_func`` that plays multi-turn episodes of each prompt's env with the policy being trained.

    ``rows`` are the training rows (a list or a ``datasets.Dataset``); each prompt TRL hands over is looked up
    among them to find its env and ground truth. ``max_turns`` is passed to the env as ``extras["max_turns"]``
    (as SkyRL's generator does). Each turn may use ``max_tokens_per_turn`` tokens (default: TRL's
    ``max_completion_length`` divided by ``max_turns``).
    """
    table = _prompt_table(rows, env_id, "env_rollout_func")

    def rollout_func(prompts: List[Any], trainer: Any) -> Dict[str, List[Any]]:
        from skygym_adapters.engines.hf import HFEngine

        batch_rows = _rows_of(table, prompts, "env_rollout_func")
        max_tokens = max_tokens_per_turn or max(1, int(trainer.args.max_completion_length) // max_turns)
        sampling = _trl_sampling(trainer, max_tokens, temperature)
        model = trainer.accelerator.unwrap_model(trainer.model)
        was_training = model.training
        engine = HFEngine(model, trainer.processing_class)  # the policy itself: no weight sync needed
        try:
            return rollout_episodes(batch_rows, engine, trainer.processing_class, max_turns, sampling, env_configs)
        finally:
            engine.close()
            model.train(was_training)

    return rollout_func


AGENT_FINISH_REASON_COLUMN = "agent_finish_reason"


def agent_rollout_func(
    agent_config: Any,
    rows: Iterable[Mapping[str, Any]],
    max_tokens_per_turn: Optional[int] = None,
    temperature: Optional[float] = None,
) -> Callable[[List[Any], Any], Dict[str, List[Any]]]:
    """A TRL ``rollout_func`` whose episodes an agent of the agent layer plays (see the module docstring).

    ``agent_config``: an agent YAML path, a shipped config's name, a mapping or an
    :class:`~skygym_adapters.agents.AgentConfig`. Its ``infer_backend`` becomes ``skyrl-train`` over the policy
    being trained and ``num_trajectories`` 1; TRL's ``temperature``/``top_p``/``top_k`` replace the YAML's, and a
    turn may use ``max_tokens_per_turn`` tokens (default: the YAML's ``max_tokens``, else TRL's
    ``max_completion_length`` divided by ``generator.max_iterations``). ``rows`` are the training rows, looked up by
    prompt. Returns ``prompt_ids``, ``completion_ids``, ``logprobs``, ``env_mask`` (the runner's loss mask) and the
    reward-function columns ``env_reward`` (the task's reward), ``env_turns`` and ``agent_finish_reason``.
    """
    import copy

    from skygym_adapters.agents.config import AgentConfig, load_agent_config, parse_agent_config

    base = agent_config if isinstance(agent_config, AgentConfig) else (
        parse_agent_config(agent_config) if isinstance(agent_config, Mapping) else load_agent_config(agent_config)
    )
    table = _prompt_table(rows, None, "agent_rollout_func", require_env_class=False)

    def rollout_func(prompts: List[Any], trainer: Any) -> Dict[str, List[Any]]:
        from skygym_adapters.agents.runner import AgentRunner
        from skygym_adapters.engines.hf import HFEngine

        batch_rows = _rows_of(table, prompts, "agent_rollout_func")
        cfg = copy.deepcopy(base)
        g = cfg.generator
        g.infer_backend, g.backend_config, g.num_trajectories = "skyrl-train", {}, 1
        cfg.data.instance_id_key = None  # trajectory i is prompt i
        own = {k: v for k, v in g.sampling_params.items() if k not in ("temperature", "top_p", "top_k", "logprobs")}
        yaml_max = next((own.pop(k) for k in ("max_generate_length", "max_tokens", "max_new_tokens") if k in own), None)
        max_tokens = max_tokens_per_turn or yaml_max or max(1, int(trainer.args.max_completion_length) // g.max_iterations)
        g.sampling_params = {**own, **_trl_sampling(trainer, int(max_tokens), temperature)}
        model = trainer.accelerator.unwrap_model(trainer.model)
        was_training = model.training
        engine = HFEngine(model, trainer.processing_class)  # the policy itself: no weight sync needed
        runner = AgentRunner(cfg, infer_engine=engine, tokenizer=trainer.processing_class)
        finished: List[Any] = []

        async def play() -> Any:
            try:
                return await runner.run(batch_rows, val_mode=False, on_trajectory_done=finished.append)
            finally:
                await runner.aclose()

        try:
            output = run_sync(play())
        finally:
            engine.close()
            model.train(was_training)
        by_instance = {(t.cfg.instance_id, t.cfg.trajectory_id): t for t in finished}
        reasons = [
            (by_instance[(i, 0)].result or {}).get("finish_reason") if (i, 0) in by_instance else None
            for i in range(len(batch_rows))
        ]
        logprobs = output.get("rollout_logprobs")
        return {
            "prompt_ids": [list(ids) for ids in output["prompt_token_ids"]],
            "completion_ids": [list(ids) for ids in output["response_ids"]],
            "logprobs": [
                list(logprobs[i]) if logprobs is not None and logprobs[i] is not None else [0.0] * len(ids)
                for i, ids in enumerate(output["response_ids"])
            ],
            "env_mask": [list(mask) for mask in output["loss_masks"]],
            EPISODE_REWARD_COLUMN: [float(r) for r in output["trajectory_rewards"]],
            EPISODE_TURNS_COLUMN: list(output["num_turns"]),
            AGENT_FINISH_REASON_COLUMN: reasons,
        }

    return rollout_func


__all__ = [
    "AGENT_FINISH_REASON_COLUMN",
    "agent_rollout_func",
    "EPISODE_REWARD_COLUMN",
    "EPISODE_TURNS_COLUMN",
    "completion_text",
    "env_reward",
    "env_rollout_func",
    "episode_reward",
    "prompt_key",
    "rollout_episodes",
    "rows_to_dataset",
]
