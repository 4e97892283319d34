"""``skyrl-gym init NAME``: a pip-installable env package that passes ``skyrl-gym check NAME`` as generated.

    skyrl-gym init word_reverse            # writes ./skyrl-gym-word-reverse/
    pip install -e ./skyrl-gym-word-reverse
    skyrl-gym check word_reverse           # rows from the package's dataset builder

The package registers its env and its dataset builder through entry points, so it exists in every process
where it is installed; its starting env (reverse a word, the answer in ``<answer>``) is there to be replaced.
"""

from __future__ import annotations

import keyword
import re
from pathlib import Path
from typing import Dict, Optional

NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")

PYPROJECT = '''[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "0.1.0"
description = "{title}: a skyrl-gym environment."
readme = "README.md"
requires-python = ">=3.10"
dependencies = ["skyrl-gym>={hub_version}"]  # not the public SkyRL-gym 0.4, which has the same name

[project.optional-dependencies]
dev = ["pytest>=8"]

[project.entry-points."skyrl_gym.envs"]
{name} = "{package}.env:{cls}"

[project.entry-points."skyrl_gym.datasets"]
{name} = "{package}.dataset:build_rows"

[tool.setuptools]
packages = ["{package}"]
'''

INIT = '''"""{title}: a skyrl-gym environment (see README.md)."""
'''

ENV = '''"""The {name!r} env: reverse a word; the answer goes in <answer>...</answer>. Replace the game with yours."""

from __future__ import annotations

from typing import Any, Dict, Optional

from skyrl_gym import BaseTextEnv, StepOutput
from skyrl_gym.errors import DataError, EnvConfigError
from skyrl_gym.tools.parsers import extract_tag


class {cls}(BaseTextEnv):
    """Reverse a word in up to two tries: 1.0 for the reversed word in <answer>...</answer>."""

    # Every env_config key it reads, with its default: `skyrl-gym info` lists them, and the trainer and the CLI
    # refuse a key that is not here (a misspelt one would leave the default in place, silently).
    config_defaults: Dict[str, Any] = {{"max_turns": 2}}

    def __init__(self, env_config: Any = None, extras: Optional[Dict[str, Any]] = None):
        super().__init__(env_config, extras)
        word = ((extras or {{}}).get("reward_spec") or {{}}).get("ground_truth")
        if not isinstance(word, str) or not word:
            raise DataError("env {name!r}: reward_spec.ground_truth must be the word to reverse; build rows with "
                            "skyrl_gym.datasets.build_rows({name!r}, size=N)")
        self.word = word
        max_turns = self.env_config.get("max_turns", self.config_defaults["max_turns"])
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:  # `--check` names it
            raise EnvConfigError(f"env {name!r}: env_config.max_turns must be a whole number >= 1, got {{max_turns!r}}")
        self.max_turns = max_turns

    def step(self, action: str) -> StepOutput:
        self.turns += 1
        answer = extract_tag(action if isinstance(action, str) else "", "answer")
        metadata: Dict[str, Any] = {{"answer": answer}}
        correct = answer == self.word[::-1]
        if answer is None:
            metadata["reason"] = "no complete <answer>...</answer> block"
        elif not correct:
            metadata["reason"] = f"{{answer[:100]!r}} is not {{self.word!r}} reversed"
        done = correct or self.turns >= self.max_turns
        retry = [] if done else [{{"role": "user", "content": "Not quite. Try again, in <answer>...</answer>."}}]
        return StepOutput(observations=retry, reward=float(correct), done=done, metadata=metadata)
'''

DATASET = '''"""Rows for the {name!r} env (users reach them through skyrl_gym.datasets.build_rows({name!r}, ...))."""

from __future__ import annotations

import random
from typing import Any, Dict, Iterator, Optional

from skyrl_gym.datasets import check_generated_split, split_items

WORDS = ["gym", "reward", "policy", "agent", "token", "rollout", "critic", "python", "batch", "sample", "value",
         "prompt", "answer", "model", "tensor", "kernel", "buffer", "return", "action", "state"]


def build_rows(
    split: str = "train", size: Optional[int] = None, seed: int = 0, **kwargs: Any
) -> Iterator[Dict[str, Any]]:
    """The dataset-builder contract: ``builder(split, size, seed, **kwargs)``; row ``i`` depends only on
    (seed, split, i) and the keyword arguments. Add your options as keyword parameters before ``**kwargs``."""
    if kwargs:
        raise TypeError(f"the {name} builder takes no option {{sorted(kwargs)}} (only split, size, seed)")
    check_generated_split("{name}", split)
    if size is None:
        raise ValueError("{name} rows are generated: give a size, e.g. build_rows({name!r}, size=64)")
    words = split_items(WORDS, split)  # no word in two splits: a test score is on words training never showed
    for index in range(size):
        word = random.Random(f"{name}:{{seed}}:{{split}}:{{index}}").choice(words)
        yield {{
            "data_source": "{name}",
            "prompt": [{{"role": "user", "content": f"Reverse the word {{word!r}}. Answer in <answer>...</answer>."}}],
            "env_class": "{name}",
            "reward_spec": {{"method": "rule", "ground_truth": word}},
            "extra_info": {{"split": split, "index": index, "reference_action": f"<answer>{{word[::-1]}}</answer>"}},
        }}
'''

AUDIT = '''"""The audit profile of the {name!r} env: how ``skyrl-gym audit {name}`` reads its answers.

Add hacks of your own that fit your env (skyrl-gym's docs/audit.md, "Adding an env's own hacks")."""

from typing import Optional

from skyrl_gym.audit import AuditProfile, Hack
from skyrl_gym.audit.profiles import ANSWER_TAG, ground_truth_text, text_profile

OWN_HACKS = (
    Hack("the word itself", "{name}",
         lambda case: ANSWER_TAG.reply(case.answer[::-1]) if case.answer else None, "the word as given"),
)


def answer_of(row) -> Optional[str]:
    """The right answer of a row, the reversed word: the golden reply, and what the hacks hide among wrong ones
    (None for a row without one: the env itself says what is wrong with such a row)."""
    word = ground_truth_text(row)
    return None if word is None else word[::-1]


def audit_profile(env_id: str) -> AuditProfile:
    return text_profile(ANSWER_TAG, answer_of=answer_of).with_hacks(*OWN_HACKS)
'''

TEST = '''"""The {name!r} env through skyrl_gym's public API, as installed (entry points)."""

import skyrl_gym
from skyrl_gym import datasets
from skyrl_gym.checker import check_env
from skyrl_gym.data import row_extras


def test_the_env_and_its_builder_are_registered():
    assert "{name}" in skyrl_gym.registry and datasets.has_dataset("{name}")


def test_rewards_and_reasons():
    row = datasets.build_rows("{name}", split="test", size=1, seed=0)[0]
    word = row["reward_spec"]["ground_truth"]
    env = skyrl_gym.make("{name}", extras=row_extras(row))
    env.init(row["prompt"])
    first = env.step("<answer>nope</answer>")
    assert first["reward"] == 0.0 and not first["done"] and "is not" in first["metadata"]["reason"]
    assert env.step(f"<answer>{{word[::-1]}}</answer>")["reward"] == 1.0


def test_the_builder_refuses_an_unknown_split_or_option():
    import pytest

    with pytest.raises(ValueError, match="not 'tset'"):
        datasets.build_rows("{name}", split="tset", size=1)
    with pytest.raises(TypeError, match="no option"):
        datasets.build_rows("{name}", split="test", size=1, num_words=3)


def test_the_checker_passes_on_builder_rows():
    report = check_env("{name}", datasets.build_rows("{name}", split="test", size=2, seed=0), huge_action_chars=100_000)
    assert report.ok, str(report)


def test_the_audit_passes():
    from skyrl_gym.audit import audit_env

    report = audit_env("{name}", max_rows=2)
    assert report.ok, report.table()
'''

README = '''# {title}

A skyrl-gym environment, registered as `{name}`.

- **Task**: reverse a word; the answer goes in `<answer>...</answer>`. Two tries.
- **Reward**: 1.0 for the reversed word, else 0.0 with the reason in `metadata["reason"]`.
- **Rows**: `skyrl_gym.datasets.build_rows("{name}", split="train", size=64, seed=0)`.

It needs skyrl-gym {hub_version} or later (the hub it was made with). Install the hub first, then this package;
the public SkyRL-gym 0.4 has the same distribution name and cannot run it.

```bash
pip install -e '.[dev]'
skyrl-gym check {name}      # the checker, on rows from the dataset builder
skyrl-gym audit {name}      # golden answers and reward hacks against the verifier ({package}/audit.py)
skyrl-gym conform {name}    # the same episodes through every training adapter (loads the embedded model)
python -m pytest tests
```

A dataset row:

```json
{{"data_source": "{name}", "prompt": [{{"role": "user", "content": "Reverse the word 'gym'. Answer in <answer>...</answer>."}}],
 "env_class": "{name}", "reward_spec": {{"method": "rule", "ground_truth": "gym"}},
 "extra_info": {{"split": "train", "index": 0, "reference_action": "<answer>myg</answer>"}}}}
```
'''


class ScaffoldError(ValueError):
    """The name or the target folder cannot be used; the message says why and what to do."""


def distribution(name: str) -> str:
    """The package's distribution name for env ``name``, and the folder ``init`` writes it to."""
    return "skyrl-gym-" + name.replace("_", "-")


def names(name: str) -> Dict[str, str]:
    """The names derived from an env id: distribution, package, class, title."""
    if not NAME_RE.match(name) or keyword.iskeyword(name):
        suggestion = re.sub(r"[^a-z0-9_]+", "_", name.lower()).strip("_")
        suggestion = suggestion if suggestion and suggestion[0].isalpha() else f"env_{suggestion}".rstrip("_")
        raise ScaffoldError(f"{name!r} cannot be an env id and package name: use lower-case letters, digits and '_', "
                            f"starting with a letter, e.g. {suggestion!r}")
    import skyrl_gym

    if name in skyrl_gym.registry:
        provider = skyrl_gym.spec(name).provider
        raise ScaffoldError(f"an env {name!r} is already registered (by {provider}); pick another name")
    words = name.split("_")
    return {
        "name": name,
        "hub_version": skyrl_gym.__version__,
        "dist": distribution(name),
        "package": f"skygym_{name}",
        "cls": "".join(w.capitalize() for w in words) + "Env",
        "title": " ".join(words).capitalize(),
    }


def scaffold(name: str, directory: Optional[Path] = None) -> Path:
    """Write the package for env ``name`` into ``directory`` (default ``./skyrl-gym-<name>``); return it."""
    values = names(name)
    root = Path(directory) if directory is not None else Path.cwd() / values["dist"]
    if root.exists() and any(root.iterdir()):
        raise ScaffoldError(f"{root} exists and is not empty; pass another --dir or remove it")
    package = root / values["package"]
    files = {
        root / "pyproject.toml": PYPROJECT,
        root / "README.md": README,
        package / "__init__.py": INIT,
        package / "env.py": ENV,
        package / "dataset.py": DATASET,
        package / "audit.py": AUDIT,
        root / "tests" / f"test_{name}.py": TEST,
    }
    for path, template in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(template.format(**values), encoding="utf-8")
    return root


__all__ = ["ScaffoldError", "names", "scaffold"]
