"""One env class for every ``reasoning_gym/<name>`` id (the id's ``dataset`` kwarg picks the dataset).

Single turn. The answer is the body of the last complete ``<answer>...</answer>`` block of the response,
stripped (reasoning-gym's own system prompt asks for exactly that); the reward is reasoning-gym's
``score_answer(answer, entry)`` for the row's entry, between 0.0 and 1.0 (some datasets give partial credit).
Every reward below 1.0 is explained in ``metadata["reason"]``.

The entry comes from the row (``reward_spec`` as written by the dataset builder: dataset, settings, seed,
index), or, for a row with no reward_spec at all, from ``env_config``: ``{"seed": 0, "index": 0, "split": "train",
"settings": {...}}``; then ``init`` replaces the prompt with the generated question.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional, Tuple

from skyrl_gym import BaseTextEnv, StepOutput
from skyrl_gym.errors import DataError
from skyrl_gym.tools.parsers import extract_tag, has_look_alike_digits

from skygym_contrib.reasoning_gym import answer_guard, generate, shortcuts
from skygym_contrib.reasoning_gym.names import env_id

MAX_ANSWER_CHARS = 20_000  # longer answers are not scored (some scorers parse with sympy or regexes)
# The forms in which reasoning-gym's containment credit is recognised (containment_credit_refused): the text as
# written, without commas, upper-cased, and with each line's words joined by single spaces.
_CONTAINMENT_FORMS = (
    lambda text: text,
    lambda text: text.replace(",", ""),
    lambda text: text.strip().upper(),
    lambda text: "\n".join(" ".join(line.split()) for line in text.strip().split("\n")),
)


class ReasoningGymEnv(BaseTextEnv):
    """A reasoning-gym task, scored by reasoning-gym's own score_answer on the <answer> block."""

    # settings/seed/split/index: the question when no row is given; containment_credit: see below; partial_credit:
    # false pays only a full score (a family's own partial credit, e.g. word_sorting's 0.2 for the words echoed, is a
    # shortcut a policy can learn)
    config_defaults = {"settings": None, "seed": 0, "split": "train", "index": 0, "containment_credit": False,
                       "partial_credit": True}

    def __init__(self, env_config: Any = None, extras: Optional[Dict[str, Any]] = None, dataset: str = ""):
        super().__init__(env_config, extras)
        generate.check_name(dataset)
        self.dataset = dataset
        self.max_turns = 1
        spec = (extras or {}).get("reward_spec") or {}
        config = self.env_config if isinstance(self.env_config, dict) else {}
        self.generated_prompt = False
        try:
            if spec.get("dataset") is not None:
                if spec["dataset"] != dataset:
                    raise DataError(f"env {env_id(dataset)!r}: the row is for reasoning-gym dataset "
                                    f"{spec['dataset']!r}; use env_class {env_id(spec['dataset'])!r}")
                settings = spec.get("settings") or "{}"
                settings = settings if isinstance(settings, str) else generate.settings_json(settings)
                seed, index = int(spec["seed"]), int(spec["index"])
            elif spec:
                raise DataError(f"env {env_id(dataset)!r}: the row's reward_spec names no reasoning-gym entry "
                                "(dataset, settings, seed, index); build rows with "
                                f"skyrl_gym.datasets.build_rows({env_id(dataset)!r}, size=N)")
            else:  # no row at all: the question comes from env_config
                settings = generate.settings_json(config.get("settings") or {})
                seed, index, _ = generate.find(dataset, settings, int(config.get("seed", 0)),  # a client's choice
                                               str(config.get("split", "train")), int(config.get("index", 0)),
                                               budget_s=generate.VET_WAIT_S)
                self.generated_prompt = True
            self.scorer = generate.dataset(dataset, settings, seed)
            self.entry = generate.entry(dataset, settings, seed, index)
        except (KeyError, TypeError, ValueError, json.JSONDecodeError) as exc:
            if isinstance(exc, DataError):
                raise
            raise DataError(f"env {env_id(dataset)!r}: cannot generate the row's entry ({exc}); build rows with "
                            f"skyrl_gym.datasets.build_rows({env_id(dataset)!r}, size=N), or give env_config "
                            "{'seed': S, 'index': I, 'settings': {...}}") from exc
        truth = spec.get("ground_truth")
        if not self.generated_prompt and truth is not None and str(truth) != str(self.entry.get("answer")):
            generated = str(self.entry.get("answer"))[:80]
            raise DataError(f"env {env_id(dataset)!r}: the row's ground_truth {str(truth)[:80]!r} is not the answer "
                            f"reasoning-gym {generate.version()} generates for it ({generated!r}); "
                            "the rows were built with another reasoning-gym version: build them again")

    def containment_credit_refused(self, answer: str, reward: float) -> bool:
        """True for reasoning-gym's containment credit, ``len(expected) / len(answer)`` for an answer that
        only contains the expected one (the default ``score_answer`` and ``compute_decimal_reward`` give it):
        a hedged list of candidates ("-87, -88, -89") would earn it, so it is not paid unless
        ``env_config["containment_credit"]`` is true. Other partial credit is the dataset's own and is
        kept unless ``env_config["partial_credit"]`` is false."""
        config = self.env_config if isinstance(self.env_config, dict) else {}
        expected = self.entry.get("answer")
        if config.get("containment_credit") or not isinstance(expected, str) or not expected:
            return False
        # The scorers normalise the answer before they look for the expected one in it (tsumego upper-cases it,
        # manipulate_matrix joins its rows' numbers with single spaces): a hedge in lower case or with extra spaces
        # escaped a check of the raw text alone.
        for normalise in _CONTAINMENT_FORMS:
            seen, wanted = normalise(answer), normalise(expected)
            if wanted and wanted in seen and abs(reward - len(wanted) / len(seen)) < 1e-9:
                return True
        return False

    def _scored_by(self) -> str:
        """The reasoning-gym dataset whose ``score_answer`` reads the answer: a composite hands the entry to
        the dataset its metadata names (``string_insertion`` in a composite evaluated answers the same)."""
        if self.dataset != "composite":
            return self.dataset
        source = (self.entry.get("metadata") or {}).get("source_dataset")
        inner = getattr(self.scorer, "datasets", {}).get(source)
        return answer_guard.dataset_name(inner, default=str(source))

    def init(self, prompt: Any = None) -> Tuple[Any, Dict[str, Any]]:
        if self.generated_prompt:
            prompt = [{"role": "system", "content": generate.system_prompt()},
                      {"role": "user", "content": self.entry["question"]}]
        return super().init(prompt)

    def step(self, action: str) -> StepOutput:
        self.turns += 1
        answer = extract_tag(action if isinstance(action, str) else "", "answer")
        metadata: Dict[str, Any] = {"dataset": self.dataset, "answer": answer}
        reward = 0.0
        if answer is None:
            metadata["reason"] = "no complete <answer>...</answer> block in the response"
        elif len(answer) > MAX_ANSWER_CHARS:
            metadata["reason"] = f"the answer is {len(answer):,} characters long; at most {MAX_ANSWER_CHARS:,} are scored"
        elif has_look_alike_digits(answer):
            metadata["reason"] = ("the answer writes digits other than ASCII 0-9 (look-alike Unicode digits "
                                  "are not read)")
        elif (refused := answer_guard.refusal(self._scored_by(), answer, self.entry.get("answer"))):
            metadata["reason"] = f"the answer is not scored: {refused}"
        else:
            try:
                reward = float(self.scorer.score_answer(answer, self.entry))
            except Exception as exc:  # a scorer that cannot parse the answer: it is wrong, not an env error
                metadata["reason"] = f"reasoning-gym's score_answer could not read the answer: {type(exc).__name__}: {exc}"
                reward = 0.0
            else:
                if reward != reward or reward < 0.0:  # NaN or negative: treat as wrong
                    metadata["reason"] = f"reasoning-gym's score_answer returned {reward}; counted as 0.0"
                    reward = 0.0
                elif (fixed := shortcuts.shortcut(self._scored_by(), answer, self.entry, reward)) is not None:
                    reward, metadata["reason"] = fixed
                elif reward < 1.0 and self.containment_credit_refused(answer, reward):
                    metadata["reason"] = (f"{answer[:200]!r} is not the answer, it only contains it; "
                                          "reasoning-gym's credit for that is not paid "
                                          "(env_config containment_credit=true pays it)")
                    reward = 0.0
                elif reward < 1.0:
                    expected = self.entry.get("answer")
                    shown = f"; expected {str(expected)[:200]!r}" if expected is not None else ""
                    kind = "wrong answer" if reward == 0.0 else "partial credit"
                    metadata["reason"] = f"{kind}: reasoning-gym scored {answer[:200]!r} {reward:g}{shown}"
                    config = self.env_config if isinstance(self.env_config, dict) else {}
                    if reward > 0.0 and not config.get("partial_credit", True):
                        metadata["reason"] += " (not paid: env_config partial_credit=false pays only a full score)"
                        reward = 0.0
        return StepOutput(observations=[], reward=min(reward, 1.0), done=True, metadata=metadata)
