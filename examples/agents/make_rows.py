"""Rows for the agent examples: one-digit products for the ``code_interpreter`` env (Python in a sandbox).

The questions come from the ``multiply`` dataset builder (deterministic per seed, split and index); the system
prompt shows the tool call and the answer format with a worked example (SmolLM2-135M ignores a bare instruction
to box its answer), and ``code_interpreter`` grades the last ``\\boxed{}`` (1.0 or 0.0).

    python examples/agents/make_rows.py --out /tmp/data/agent_multiply --train 64 --val 16
"""

from __future__ import annotations

import argparse
from pathlib import Path

from skyrl_gym.data import write_jsonl
from skyrl_gym.datasets import build_rows

SYSTEM = (
    "You can run Python: write <tool><python>print(7 * 8)</python></tool> and its output comes back. "
    "Answer with the product in \\boxed{}. Example:\n"
    "Q: What is 2 * 3?\nA: 2 * 3 = 6, so the answer is \\boxed{6}."
)


def tool_rows(split: str, size: int, seed: int = 0, max_turns: int = 3) -> list:
    rows = []
    for row in build_rows("multiply", split=split, size=size, seed=seed, num_digits=1):
        question = row["prompt"][-1]["content"]
        rows.append(
            {
                **row,
                "data_source": "agent_multiply",
                "env_class": "code_interpreter",
                "prompt": [
                    {"role": "system", "content": SYSTEM},
                    {"role": "user", "content": f"What is {question}?"},
                ],
                "max_turns": max_turns,
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder for train.jsonl and validation.jsonl")
    parser.add_argument("--train", type=int, default=64)
    parser.add_argument("--val", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(tool_rows("train", args.train, args.seed), out / "train.jsonl")
    write_jsonl(tool_rows("validation", args.val, args.seed), out / "validation.jsonl")
    print(f"wrote {args.train} + {args.val} rows to {out}")


if __name__ == "__main__":
    main()
