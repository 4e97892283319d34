"""Dataset rows of the ``swe`` env: one row per SWE instance, the instance's fields beside the prompt.

    rows = skyrl_gym.datasets.build_rows("swe", split="train", instances="out/instances.jsonl")

``instances`` is a JSONL file in the SWE-bench format (``skyrl-gym swe build`` writes one) or a
dataset name on the hub (``princeton-nlp/SWE-bench_Lite``); without it, ``$SKYGYM_SWE_INSTANCES``.
Splits: ``train`` and ``test`` divide the instances by a hash of their id (about 9 to 1, stable
when instances are added); ``all`` keeps every one. Rows keep the file's order.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any, Dict, Iterator, Optional

from skyrl_gym.envs.swe.instances import SWEInstance, load_instances

SYSTEM_PROMPT = """You are a software engineer fixing a bug in the repository at /testbed.
You work through tools. Call one per message, written as
<tool_call>{"name": "<tool>", "arguments": {...}}</tool_call>
Tools:
- bash: {"command": "..."} runs a bash command in /testbed (each call starts in /testbed).
- str_replace_editor: {"command": "view" | "create" | "str_replace" | "insert" | "undo_edit", "path": "/testbed/...",
  plus "file_text", "old_str", "new_str", "insert_line" or "view_range" as the command needs}.
- submit: {} ends the episode; your changes are graded by hidden tests.
Find the cause, fix the library code (not the tests), check your fix, then submit."""


def instance_row(instance: SWEInstance, max_turns: Optional[int] = None) -> Dict[str, Any]:
    row: Dict[str, Any] = {
        "data_source": f"swe/{instance.repo}",
        "prompt": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": instance.problem_statement},
        ],
        "env_class": "swe",
        "reward_spec": {"method": "swe_resolved", "ground_truth": instance.instance_id},
        "extra_info": {"instance_id": instance.instance_id},
        **instance.to_row(),
    }
    if max_turns is not None:
        row["max_turns"] = max_turns
    return row


def in_split(instance_id: str, split: str) -> bool:
    if split == "all":
        return True
    if split not in ("train", "test"):
        raise ValueError(f"the swe dataset has the splits train, test and all, not {split!r}")
    bucket = hashlib.sha256(instance_id.encode()).digest()[0] % 10
    return (bucket == 0) == (split == "test")


def build_rows(
    split: str = "train", size: Optional[int] = None, seed: int = 0, instances: Optional[str] = None,
    max_turns: Optional[int] = None,
) -> Iterator[Dict[str, Any]]:
    source = instances or os.environ.get("SKYGYM_SWE_INSTANCES")
    if not source:
        raise ValueError(
            "the swe dataset needs instances: build some with `skyrl-gym swe build --out DIR` and pass "
            "instances='DIR/instances.jsonl' (or set SKYGYM_SWE_INSTANCES)"
        )
    for instance in load_instances(source):
        if in_split(instance.instance_id, split):
            yield instance_row(instance, max_turns)
