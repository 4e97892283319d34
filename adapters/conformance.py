"""Adapter conformance kit: the same scripted actions through every adapter, the same results expected.

For an env and a few rows, each with a script of assistant texts, the kit plays every episode

* directly against the env (the reference: per-turn rewards, turns, observations),
* through the bundled rollout loop (:mod:`adapters.rollout`) with a scripted engine,
* through veRL's own ``AgentLoopWorker`` and our ``skyrl_gym_agent`` loop (when ``verl`` is installed),
* through the TRL adapter's rollout and reward functions (when ``trl`` is installed),
* through the Gymnasium bridge (when ``gymnasium`` is installed),
* through the OpenAI-chat adapter (``<tool_call>`` actions travel as native tool calls),

and checks that each adapter ran, gave the same rewards turn by turn, took the same number of turns,
and (for adapters that produce tokens) built a well-formed mask: one run of 1s per assistant turn that
decodes to exactly the scripted text, 0s on everything the env said. :func:`format_table` prints the
adapter x check table; ``skyrl-gym conform ENV`` does it from the command line.

Adapters are small classes with ``name``, ``available()`` and ``run(cases, context)``; pass your own to
:func:`run_conformance` to check an adapter of your trainer the same way.
"""

from __future__ import annotations

import asyncio
import copy
import importlib.util
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple

import skyrl_gym
from skyrl_gym.data import row_extras, validate_row

CHECKS = ("ran", "rewards", "turns", "masks")
OK, FAIL, NA, SKIPPED = "ok", "FAIL", "n/a", "skipped"


@dataclass
class Case:
    """One episode to replay: a dataset row and the assistant texts to send, turn by turn."""

    row: Dict[str, Any]
    actions: List[str]
    env_config: Any = None

    @property
    def key(self) -> str:
        """The text that identifies this episode's prompt (its last user message)."""
        users = [m["content"] for m in self.row["prompt"] if m.get("role") == "user"]
        return users[-1] if users else self.row["prompt"][-1]["content"]


@dataclass
class Reference:
    """What the env itself does with a case's actions."""

    rewards: List[float]
    observations: List[List[str]]  # the env's message contents after each turn
    max_turns: int
    ended_by: str  # "done" | "max_turns"

    @property
    def turns(self) -> int:
        return len(self.rewards)

    @property
    def total(self) -> float:
        return float(sum(self.rewards))


@dataclass
class Run:
    """What one adapter made of one case."""

    turn_rewards: Optional[List[float]]  # None when the adapter only reports the episode total
    total_reward: float
    turns: int
    token_ids: Optional[List[int]] = None  # response tokens (model turns and observations)
    mask: Optional[List[int]] = None  # 1 = model token, 0 = env/template token
    error: Optional[str] = None
    notes: List[str] = field(default_factory=list)


@dataclass
class Context:
    """What adapters need besides the cases: a tokenizer and the model folder it comes from."""

    model_dir: Optional[Path] = None
    tokenizer: Any = None
    workdir: Optional[Path] = None
    cache: Dict[Any, Any] = field(default_factory=dict)  # adapters keep costly set-up here (veRL's config)

    def require_tokenizer(self) -> Any:
        if self.tokenizer is None:
            from transformers import AutoTokenizer

            from adapters.models import resolve_model

            if self.model_dir is None:
                self.model_dir = resolve_model(None).path
            self.tokenizer = AutoTokenizer.from_pretrained(str(self.model_dir))
        return self.tokenizer


class ConformanceAdapter(Protocol):
    name: str
    produces_tokens: bool

    def available(self) -> Tuple[bool, str]: ...

    def run(self, cases: Sequence[Case], context: Context, references: Sequence[Reference]) -> List[Run]: ...


# ----------------------------------------------------------------------------------------------
# The reference: the env played directly
# ----------------------------------------------------------------------------------------------
def play_reference(case: Case) -> Reference:
    """Step the env with the case's actions until it is done (or its ``max_turns`` is reached)."""
    row = validate_row(case.row, require_env_class=True)
    with skyrl_gym.make(row["env_class"], env_config=copy.deepcopy(case.env_config), extras=row_extras(copy.deepcopy(row))) as env:
        env.init(copy.deepcopy(row["prompt"]))
        max_turns = int(getattr(env, "max_turns", 1) or 1)
        rewards: List[float] = []
        observations: List[List[str]] = []
        for action in case.actions:
            output = env.step(action)
            rewards.append(float(output["reward"]))
            observations.append([str(m.get("content", "")) for m in output.get("observations") or []])
            if output["done"]:
                return Reference(rewards, observations, max_turns, "done")
            if len(rewards) >= max_turns:
                return Reference(rewards, observations, max_turns, "max_turns")
    raise ValueError(
        f"case for env {row['env_class']!r} ran out of actions after {len(rewards)} turns before the episode ended; "
        "give actions until the env is done or its max_turns is reached"
    )


def _scripts(cases: Sequence[Case], references: Sequence[Reference]) -> Dict[str, List[str]]:
    return {case.key: list(case.actions[: ref.turns]) for case, ref in zip(cases, references)}


def _scripted_engine(cases: Sequence[Case], references: Sequence[Reference], context: Context) -> Any:
    from adapters.scripted import ScriptedEngine

    return ScriptedEngine(context.require_tokenizer(), _scripts(cases, references))


# ----------------------------------------------------------------------------------------------
# Adapters
# ----------------------------------------------------------------------------------------------
class RolloutAdapter:
    """The bundled rollout loop (token-in/token-out, masks from the chat template)."""

    name = "rollout"
    produces_tokens = True

    def available(self) -> Tuple[bool, str]:
        if importlib.util.find_spec("transformers") is None:
            return False, "transformers is not installed"
        return True, ""

    def run(self, cases: Sequence[Case], context: Context, references: Sequence[Reference]) -> List[Run]:
        from adapters.rollout import RolloutConfig, RolloutGenerator

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
                trajectories = asyncio.run(generator.run_rows([copy.deepcopy(cases[i].row) for i in indices]))
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
            return False, "verl is not installed (pip install 'skyrl-gym[verl]')"
        return True, ""

    def run(self, cases: Sequence[Case], context: Context, references: Sequence[Reference]) -> List[Run]:
        if context.workdir is not None:
            return self._run(cases, context, references, Path(context.workdir))
        with tempfile.TemporaryDirectory(prefix="skyrl-gym-conform-verl-") as folder:
            return self._run(cases, context, references, Path(folder))

    def _run(self, cases: Sequence[Case], context: Context, references: Sequence[Reference], workdir: Path) -> List[Run]:
        from adapters.verl.local import compose_config, generate_sequences, load_batch
        from adapters.verl.rows import rows_to_verl
        from adapters.verl.server import EngineServerManager
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
                [{"name": "skyrl_gym_agent", "_target_": "adapters.verl.agent_loop.SkyRLGymAgentLoop", "env_configs": env_configs}]
            )
        )
        if context.model_dir is None:
            from adapters.models import resolve_model

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
        output = asyncio.run(generate_sequences(config, EngineServerManager(engine), batch))
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
            return False, "trl is not installed (pip install 'skyrl-gym[trl]')"
        return True, ""

    def run(self, cases: Sequence[Case], context: Context, references: Sequence[Reference]) -> List[Run]:
        from adapters.trl import env_reward, episode_reward, rollout_episodes

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
            return False, "gymnasium is not installed (pip install 'skyrl-gym[gymnasium]')"
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
        from adapters.openai_agents import EnvChatSession, run_episode

        runs = []
        for case in cases:
            actions = iter(case.actions)
            session = EnvChatSession.from_row(copy.deepcopy(case.row), env_config=copy.deepcopy(case.env_config))
            episode = run_episode(lambda messages, tools: self.as_message(next(actions)), session)
            runs.append(
                Run(turn_rewards=list(episode.rewards), total_reward=episode.total_reward, turns=episode.turns,
                    error=episode.error)
            )
        return runs


def default_adapters() -> List[Any]:
    return [RolloutAdapter(), VerlAdapter(), TrlAdapter(), GymnasiumAdapter(), OpenAIAdapter()]


# ----------------------------------------------------------------------------------------------
# Checks and the report
# ----------------------------------------------------------------------------------------------
def _mask_problems(run: Run, case: Case, ref: Reference, tokenizer: Any) -> List[str]:
    ids, mask = run.token_ids or [], run.mask or []
    if len(ids) != len(mask):
        return [f"{len(ids)} tokens but {len(mask)} mask values"]
    if set(mask) - {0, 1}:
        return [f"mask values other than 0/1: {sorted(set(mask) - {0, 1})}"]
    runs, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            runs.append((mask[start], start, i))
            start = i
    problems = []
    model_runs = [(s, e) for v, s, e in runs if v == 1]
    if len(model_runs) != ref.turns:
        problems.append(f"{len(model_runs)} runs of mask 1, expected one per turn ({ref.turns})")
    for turn, (s, e) in enumerate(model_runs[: ref.turns]):
        text = tokenizer.decode(ids[s:e], skip_special_tokens=True).strip()
        if text != case.actions[turn].strip():
            problems.append(f"turn {turn + 1}: mask-1 tokens decode to {text[:60]!r}, the model said {case.actions[turn][:60]!r}")
    env_text = tokenizer.decode([t for t, m in zip(ids, mask) if m == 0])
    for turn, contents in enumerate(ref.observations[: ref.turns - 1]):
        for content in contents:
            if content and content not in env_text:
                problems.append(f"the env's message after turn {turn + 1} ({content[:40]!r}) is not among the mask-0 tokens")
    return problems


@dataclass
class AdapterReport:
    adapter: str
    status: Dict[str, str]  # check -> ok / FAIL / n/a / skipped
    problems: List[str] = field(default_factory=list)
    skipped_reason: str = ""

    @property
    def ok(self) -> bool:
        return all(value in (OK, NA) for value in self.status.values())


@dataclass
class ConformanceReport:
    env_id: str
    cases: int
    adapters: List[AdapterReport]

    @property
    def ok(self) -> bool:
        """Every adapter that ran passed every check (skipped adapters do not fail the report)."""
        return all(a.ok for a in self.adapters if not a.skipped_reason)

    def status(self, adapter: str, check: str) -> str:
        return next(a.status[check] for a in self.adapters if a.adapter == adapter)

    def ran(self) -> List[str]:
        return [a.adapter for a in self.adapters if not a.skipped_reason]


def _check(adapter: Any, runs: Sequence[Run], cases: Sequence[Case], refs: Sequence[Reference], context: Context) -> AdapterReport:
    status = {check: OK for check in CHECKS}
    problems: List[str] = []

    def fail(check: str, index: int, message: str) -> None:
        status[check] = FAIL
        problems.append(f"case {index}: {message}")

    if len(runs) != len(cases):
        for check in CHECKS:
            status[check] = FAIL
        return AdapterReport(adapter.name, status, [f"{len(runs)} results for {len(cases)} cases"])
    if not adapter.produces_tokens:
        status["masks"] = NA
    for index, (run, case, ref) in enumerate(zip(runs, cases, refs)):
        if run.error:
            fail("ran", index, f"error: {run.error}")
        for note in run.notes:
            fail("rewards", index, note)
        if run.turn_rewards is not None:
            if len(run.turn_rewards) != ref.turns or not all(
                math.isclose(a, b, abs_tol=1e-9) for a, b in zip(run.turn_rewards, ref.rewards)
            ):
                fail("rewards", index, f"turn rewards {run.turn_rewards}, the env gave {ref.rewards}")
        if not math.isclose(run.total_reward, ref.total, abs_tol=1e-9):
            fail("rewards", index, f"episode reward {run.total_reward}, the env gave {ref.total}")
        if run.turns != ref.turns:
            fail("turns", index, f"{run.turns} turns, the env took {ref.turns}")
        if adapter.produces_tokens:
            for problem in _mask_problems(run, case, ref, context.require_tokenizer()):
                fail("masks", index, problem)
    return AdapterReport(adapter.name, status, problems)


def run_conformance(
    env_id: str,
    cases: Optional[Sequence[Case]] = None,
    adapters: Optional[Sequence[Any]] = None,
    context: Optional[Context] = None,
    only: Optional[Sequence[str]] = None,
) -> ConformanceReport:
    """Replay ``cases`` (default: the env's built-in cases, resources included) through each available adapter.

    An adapter that raises is reported as failing ``ran`` with the error; it does not stop the others.
    ``only`` restricts the run to adapters with those names.
    """
    if cases is None:
        from adapters.conformance_cases import builtin_case_set

        with builtin_case_set(env_id) as builtin:
            return run_conformance(env_id, builtin, adapters, context, only)
    cases = list(cases)
    if not cases:
        raise ValueError(f"no conformance cases for env {env_id!r}")
    for case in cases:
        if case.row.get("env_class") not in (None, env_id):
            raise ValueError(f"a case for {env_id!r} has env_class {case.row['env_class']!r}")
        case.row.setdefault("env_class", env_id)
    keys = [case.key for case in cases]
    if len(set(keys)) != len(keys):
        raise ValueError("conformance cases need distinct prompts (the scripted engine finds its script by prompt)")
    context = context or Context()
    references = [play_reference(case) for case in cases]
    reports = []
    for adapter in adapters if adapters is not None else default_adapters():
        if only is not None and adapter.name not in only:
            continue
        available, reason = adapter.available()
        if not available:
            reports.append(AdapterReport(adapter.name, {c: SKIPPED for c in CHECKS}, skipped_reason=reason))
            continue
        try:
            runs = adapter.run(cases, context, references)
        except Exception as exc:
            status = {c: FAIL for c in CHECKS}
            reports.append(AdapterReport(adapter.name, status, [f"the adapter raised {type(exc).__name__}: {exc}"]))
            continue
        reports.append(_check(adapter, runs, cases, references, context))
    return ConformanceReport(env_id, len(cases), reports)


def format_table(report: ConformanceReport) -> str:
    """The adapter x check table, then the problems found (plain text)."""
    header = ["adapter", *CHECKS]
    rows = [[a.adapter, *(a.status[c] for c in CHECKS)] for a in report.adapters]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = [f"conformance of {report.env_id!r} over {report.cases} case(s)"]
    lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    lines.append("  ".join("-" * w for w in widths))
    for a, row in zip(report.adapters, rows):
        line = "  ".join(str(v).ljust(w) for v, w in zip(row, widths))
        lines.append(line + (f"  ({a.skipped_reason})" if a.skipped_reason else ""))
    for a in report.adapters:
        for problem in a.problems:
            lines.append(f"{a.adapter}: {problem}")
    lines.append("result: " + ("all adapters conform" if report.ok else "MISMATCH"))
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# Cases
# ----------------------------------------------------------------------------------------------
def builtin_cases(env_id: str) -> List[Case]:
    """Scripted cases of a built-in env that needs no running resources (see :mod:`adapters.conformance_cases`).

    Envs whose cases need a database, a retrieval server or a sandbox: use ``builtin_case_set(env_id)``.
    """
    from adapters.conformance_cases import builtin_case_set

    with builtin_case_set(env_id) as cases:
        for case in cases:
            if case.env_config is not None:
                raise LookupError(f"the cases of {env_id!r} need running resources: use builtin_case_set({env_id!r})")
        return copy.deepcopy(cases)


def cases_from_rows(rows: Sequence[Mapping[str, Any]], actions: Sequence[Sequence[str]], env_config: Any = None) -> List[Case]:
    """Cases from dataset rows and one list of assistant texts per row."""
    if len(rows) != len(actions):
        raise ValueError(f"got {len(rows)} rows but {len(actions)} action lists")
    cases = []
    for index, (row, texts) in enumerate(zip(rows, actions)):
        if isinstance(texts, str):
            texts = [texts]
        if not texts or not all(isinstance(t, str) for t in texts):
            raise ValueError(f"actions for row {index} must be a non-empty list of strings")
        cases.append(Case(dict(validate_row(dict(row), index)), list(texts), env_config))
    return cases


__all__ = [
    "CHECKS",
    "Case",
    "ConformanceReport",
    "Context",
    "GymnasiumAdapter",
    "OpenAIAdapter",
    "Reference",
    "RolloutAdapter",
    "Run",
    "TrlAdapter",
    "VerlAdapter",
    "builtin_cases",
    "cases_from_rows",
    "default_adapters",
    "format_table",
    "play_reference",
    "run_conformance",
]
