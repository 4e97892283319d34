"""Dataset rows for the ``reasoning_gym/<name>`` ids (reach them through ``skyrl_gym.datasets.build_rows``).

    build_rows("reasoning_gym/chain_sum", split="train", size=100, seed=0, min_terms=2, max_terms=4)

Keyword arguments are the reasoning-gym dataset's own config fields (its difficulty settings); ``seed``
and ``size`` are the builder's. Each row holds reasoning-gym's system prompt and the question; its
``reward_spec`` says how to generate the entry again (dataset, settings, seed, index), which the env does to
score with reasoning-gym's ``score_answer``; ``ground_truth`` is reasoning-gym's answer (``None`` for
datasets whose answers are checked by rules rather than compared, e.g. ``graph_color``).
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, Optional

from skyrl_gym.datasets import check_generated_split

from skygym_contrib.reasoning_gym import generate
from skygym_contrib.reasoning_gym.names import env_id


def row(name: str, split: str, seed: int, index: int, settings: str) -> Dict[str, Any]:
    dataset_seed, item, found = generate.find(name, settings, seed, split, index)
    answer = found.get("answer")
    answer = None if answer is None else str(answer)
    extra_info: Dict[str, Any] = {"split": split, "index": index, "reasoning_gym_version": generate.version()}
    if answer is not None:
        extra_info["reference_action"] = f"<answer>{answer}</answer>"
    return {
        "data_source": env_id(name),
        "prompt": [
            {"role": "system", "content": generate.system_prompt()},
            {"role": "user", "content": found["question"]},
        ],
        "env_class": env_id(name),
        "reward_spec": {"method": "rule", "ground_truth": answer, "dataset": name, "settings": settings,
                        "seed": dataset_seed, "index": item},
        "extra_info": extra_info,
    }


def build_rows(name: str, split: str, size: Optional[int], seed: int, **settings: Any) -> Iterator[Dict[str, Any]]:
    """Rows of ``reasoning_gym/<name>``; row ``i`` depends only on ``(seed, split, i)`` and the settings, and no
    question is in two splits (:func:`generate.find`)."""
    generate.check_name(name)
    if size is None:
        raise ValueError(f"{env_id(name)} rows are generated: give a size, e.g. build_rows({env_id(name)!r}, size=256)")
    check_generated_split(env_id(name), split)
    settings_json = generate.settings_json(settings)
    generate.dataset(name, settings_json, generate.base_seed(seed, split))  # bad settings fail here, once
    return (row(name, split, seed, index, settings_json) for index in range(size))
