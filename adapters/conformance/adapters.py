"""The adapters the conformance kit drives: the bundled rollout, veRL, TRL, the Gymnasium bridge, OpenAI chat.

Each has ``name``, ``produces_tokens``, ``available() -> (bool, reason)`` and
``run(cases, context, references) -> [Run]``; heavy packages are imported inside ``run``.
"""

from __future__ import annotations

import copy
import importlib.util
import math
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from skyrl_gym.data import row_extras
from skyrl_gym.episode import run_sync
from skyrl_gym.extras import install_command

from skygym_adapters.conformance.kit import Case, Context, Reference, Run


def _scripts(cases: Sequence[Case], references: Sequence[Reference]) -> Dict[str, List[str]]:
    """Each case's actions, up to the turns the env actually took, keyed by the case's prompt."""
    return {case.key: list(case.actions[: ref.turns]) for case, ref in zip(cases, references)}


def _scripted_engine(cases: Sequence[Case], references: Sequence[Reference], context: Context) -> Any:
    from skygym_adapters.scripted import ScriptedEngine

    return ScriptedEngine(context.require_tokenizer(), _scripts(cases, references))


class RolloutAdapter:
    """The bundled rollout loop (token-in/token-out, masks from the chat template)."""

    name = "rollout"
    produces_tokens = True

    def available(self) -> Tuple[bool, str]:
        if importlib.util.find_spec("transformers") is None:
            return False, "transformers is not installed: pip install 'skyrl-gym[train]'"
        return True, ""

    def run(self, cases: Sequence[Case], context: Context, references: Sequence[Reference]) -> List[Run]:
        from skygym_adapters.rollout import RolloutConfig, RolloutGenerator

        engine = _scripted_engine(cases, references, context)
        runs: List[Optional[Run]] = [None] * len(cases)
        # SkyRL's generator hands its max_turns to every env: one generator per distinct env max_turns.
        for max_turns, indices in _group_by_max_turns(references).items():
            env_configs = {cases[i].row["env_class"]: cases[i].env_config for i in indices if cases[i].env_config is not None}
            config = RolloutConfig(
                max_turns=max_turns, sampling_params={"max_generate_length": 4096}, env_configs=env_configs, max_env_workers=0
            )
            generator = RolloutGenerator(engine, context.require_tokenizer(), config)
            try:
                trajectories = run_sync(generator.run_rows([copy.deepcopy(cases[i].row) for i in indices]))
            finally:
                generator.close()
            for i, trajectory in zip(indices, trajectories):
                runs[i] = Run(
                    turn_rewards=[float(t.reward) for t in trajectory.turns],
                    total_reward=trajectory.total_reward,
                    turns=len(trajectory.turns),
                    token_ids=trajectory.response_ids(),
                    mask=trajectory.response_loss_mask(),
                    error=trajectory.error,
                )
        return [run for run in runs if run is not None]


def _group_by_max_turns(references: Sequence[Reference]) -> Dict[int, List[int]]:
    groups: Dict[int, List[int]] = {}
    for index, ref in enumerate(references):
        groups.setdefault(ref.max_turns, []).append(index)
    return groups


class VerlAdapter:
    """veRL's ``AgentLoopWorker`` (in-process) running our ``skyrl_gym_agent`` loop over a scripted server."""

    name = "verl"
    produces_tokens = True

    def available(self) -> Tuple[bool, str]:
        if importlib.util.find_spec("verl") is None:
            return False, f"verl is not installed: {install_command('verl')}"
        return True, ""

    def run(self, cases: Sequence[Case], context: Context, references: Sequence[Reference]) -> List[Run]:
        if context.workdir is not None:
            return self._run(cases, context, references, Path(context.workdir))
        with tempfile.TemporaryDirectory(prefix="skyrl-gym-conform-verl-") as folder:
            return self._run(cases, context, references, Path(folder))

    def _run(self, cases: Sequence[Case], context: Context, references: Sequence[Reference], workdir: Path) -> List[Run]:
        from skygym_adapters.verl.local import compose_config, generate_sequences, load_batch
        from skygym_adapters.verl.rows import rows_to_verl
        from skygym_adapters.verl.server import EngineServerManager
        from skyrl_gym.data import write_parquet

        tokenizer = context.require_tokenizer()
        engine = _scripted_engine(cases, references, context)
        path = write_parquet(rows_to_verl([c.row for c in cases]), workdir / "verl_rows.parquet")
        env_configs = {c.row["env_class"]: c.env_config for c in cases if c.env_config is not None}
        prompt_length, response_length = 2048, 4096
        loop_file = workdir / "agent_loop.yaml"
        import yaml  # a veRL dependency (through hydra/omegaconf)

        loop_file.write_text(
            yaml.safe_dump(
                [{"name": "skyrl_gym_agent", "_target_": "skygym_adapters.verl.agent_loop.SkyRLGymAgentLoop", "env_configs": env_configs}]
            )
        )
        if context.model_dir is None:
            from skygym_adapters.models import resolve_model

            context.model_dir = resolve_model(None).path
        key = ("verl_config", str(context.model_dir))
        if key not in context.cache:  # composing veRL's Hydra config takes seconds: once per context
            context.cache[key] = compose_config(
                context.model_dir,
                [
                    f"data.max_prompt_length={prompt_length}",
                    f"data.max_response_length={response_length}",
                    "actor_rollout_ref.rollout.name=vllm",
                ],
            )
        config = copy.deepcopy(context.cache[key])
        config.actor_rollout_ref.rollout.agent.agent_loop_config_path = str(loop_file)
        batch = load_batch(path, config, tokenizer)
        output = run_sync(generate_sequences(config, EngineServerManager(engine), batch))
        extra = output.non_tensor_batch
        runs = []
        for i in range(len(cases)):
            length = int(output.batch["attention_mask"][i, prompt_length:].sum())
            ids = output.batch["responses"][i, :length].tolist()
            mask = output.batch["response_mask"][i, :length].tolist()
            notes = []
            rm_total = float(output.batch["rm_scores"][i].sum()) if "rm_scores" in output.batch.keys() else math.nan
            if not math.isclose(rm_total, float(extra["skyrl_gym_reward"][i]), rel_tol=1e-6, abs_tol=1e-6):  # float32
                notes.append(f"rm_scores sum {rm_total} != episode reward {extra['skyrl_gym_reward'][i]}")
            runs.append(
                Run(
                    turn_rewards=[float(r) for r in extra["turn_scores"][i]],
                    total_reward=float(extra["skyrl_gym_reward"][i]),
                    turns=int(extra["assistant_turns"][i]),
                    token_ids=ids,
                    mask=mask,
                    error=extra["skyrl_gym_error"][i],
                    notes=notes,
                )
            )
        return runs


class TrlAdapter:
    """The TRL adapter: ``rollout_episodes`` (what ``env_rollout_func`` returns to GRPOTrainer), ``episode_reward``,
    and ``env_reward`` on the first turn."""

    name = "trl"
    produces_tokens = True

    def available(self) -> Tuple[bool, str]:
        if importlib.util.find_spec("trl") is None:
            return False, f"trl is not installed: {install_command('trl')}"
        return True, ""

    def run(self, cases: Sequence[Case], context: Context, references: Sequence[Reference]) -> List[Run]:
        from skygym_adapters.trl import env_reward, episode_reward, rollout_episodes

        tokenizer = context.require_tokenizer()
        engine = _scripted_engine(cases, references, context)
        runs: List[Optional[Run]] = [None] * len(cases)
        for max_turns, indices in _group_by_max_turns(references).items():
            rows = [cases[i].row for i in indices]
            env_configs = {cases[i].row["env_class"]: cases[i].env_config for i in indices if cases[i].env_config is not None}
            result = rollout_episodes(rows, engine, tokenizer, max_turns, {"max_generate_length": 4096}, env_configs or None)
            totals = episode_reward([r["prompt"] for r in rows], [""] * len(rows),
                                    **{k: v for k, v in result.items() if k.startswith("env_")})
            for j, i in enumerate(indices):
                case, ref = cases[i], references[i]
                notes = []
                columns = {k: [v] for k, v in row_extras(case.row).items()}
                first = env_reward(case.row["env_class"], env_config=case.env_config)(
                    [case.row["prompt"]], [[{"role": "assistant", "content": case.actions[0]}]], **columns
                )[0]
                if first is None or not math.isclose(first, ref.rewards[0], abs_tol=1e-9):
                    notes.append(f"env_reward scored the first action {first}, the env gave {ref.rewards[0]}")
                runs[i] = Run(
                    turn_rewards=None,
                    total_reward=float(totals[j]),
                    turns=int(result["env_turns"][j]),
                    token_ids=list(result["completion_ids"][j]),
                    mask=list(result["env_mask"][j]),
                    notes=notes,
                )
        return [run for run in runs if run is not None]


class GymnasiumAdapter:
    """The Gymnasium bridge: ``reset(options={"row": row})`` then ``step(text)`` until terminated or truncated."""

    name = "gymnasium"
    produces_tokens = False

    def available(self) -> Tuple[bool, str]:
        if importlib.util.find_spec("gymnasium") is None:
            return False, f"gymnasium is not installed: {install_command('gymnasium')}"
        if importlib.util.find_spec("skyrl_gym.gymnasium_bridge") is None:
            return False, "this skyrl_gym has no gymnasium_bridge"
        return True, ""

    def run(self, cases: Sequence[Case], context: Context, references: Sequence[Reference]) -> List[Run]:
        from skyrl_gym import gymnasium_bridge

        runs = []
        for case, ref in zip(cases, references):
            env = gymnasium_bridge.make(case.row["env_class"], env_config=copy.deepcopy(case.env_config))
            try:
                env.reset(seed=0, options={"row": copy.deepcopy(case.row)})
                rewards: List[float] = []
                for action in case.actions:
                    _obs, reward, terminated, truncated, _info = env.step(action)
                    rewards.append(float(reward))
                    if terminated or truncated:
                        break
            finally:
                env.close()
            runs.append(Run(turn_rewards=rewards, total_reward=float(sum(rewards)), turns=len(rewards)))
        return runs


class OpenAIAdapter:
    """The OpenAI-chat adapter: each action as an assistant message; ``<tool_call>`` blocks as native tool calls."""

    name = "openai"
    produces_tokens = False

    def available(self) -> Tuple[bool, str]:
        return True, ""

    @staticmethod
    def as_message(action: str) -> Dict[str, Any]:
        """The assistant message a tool-calling model would send for ``action``."""
        from skyrl_gym.tools.parsers import parse_json_tool_calls

        parsed = parse_json_tool_calls(action)
        if not parsed.calls or parsed.errors:
            return {"role": "assistant", "content": action}
        text = action[: action.find("<tool_call>")].rstrip("\n")
        calls = [
            {"id": f"call_{i}", "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for i, c in enumerate(parsed.calls)
        ]
        return {"role": "assistant", "content": text, "tool_calls": calls}

    def run(self, cases: Sequence[Case], context: Context, references: Sequence[Reference]) -> List[Run]:
        from skygym_adapters.openai_agents import run_episode

        runs = []
        for case in cases:
            actions = iter(case.actions)
            episode = run_episode(lambda messages, tools: self.as_message(next(actions)), copy.deepcopy(case.row),
                                  env_config=copy.deepcopy(case.env_config))
            runs.append(
                Run(turn_rewards=list(episode.rewards), total_reward=episode.total_reward, turns=episode.turns,
                    error=episode.error)
            )
        return runs


def default_adapters() -> List[Any]:
    return [RolloutAdapter(), VerlAdapter(), TrlAdapter(), GymnasiumAdapter(), OpenAIAdapter()]




__all__ = ["GymnasiumAdapter", "OpenAIAdapter", "RolloutAdapter", "TrlAdapter", "VerlAdapter", "default_adapters"]
