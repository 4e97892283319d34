"""What the trainer's row check costs on a GSM8K-sized file (what `skyrl-gym train --check` and a run's set-up do
before Ray starts: read and validate every row, then build each row's env for its own check).

    python bench/row_check.py [--rows 7473] [--repeats 5]

Writes a JSONL file of GSM8K-shaped rows (the train split's size by default) to a temporary folder, then times
``skygym_train.dataset.read_dataset`` and ``skygym_train.trainer.rows_problems`` on it. Figures are printed, never
asserted.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from skygym_train.config.loader import load_config
from skygym_train.dataset import DatasetRows, read_dataset
from skygym_train.trainer import rows_problems
from skyrl_gym.data import write_jsonl

QUESTION = ("Natalia sold clips to {i} of her friends in April, and then she sold half as many clips in May. How "
            "many clips did Natalia sell altogether in April and May? Let's think step by step and output the final "
            "answer after \"####\".")


def gsm8k_shaped(size: int):
    for i in range(size):
        yield {
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": QUESTION.format(i=i)}],
            "env_class": "gsm8k",
            "reward_spec": {"method": "rule", "ground_truth": str(i)},
            "extra_info": {"split": "train", "index": i, "answer": f"... #### {i}"},
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=7473, help="rows in the file (GSM8K's train split: 7,473)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = write_jsonl(gsm8k_shaped(args.rows), Path(folder) / "train.jsonl")
        cfg = load_config([f"data.train_data=['{path}']", "environment.env_class=gsm8k",
                           "trainer.train_batch_size=8", "trainer.policy_mini_batch_size=8"], validate=False)
        read, checked = [], []
        for _ in range(args.repeats):
            start = time.perf_counter()
            train = read_dataset(cfg.data.train_data, "gsm8k")
            middle = time.perf_counter()
            problems = rows_problems(cfg, train, DatasetRows())
            read.append(middle - start)
            checked.append(time.perf_counter() - middle)
        assert not problems and len(train.rows) == args.rows, problems  # the figures are of a clean file
    print(f"{args.rows} rows, median of {args.repeats}: read and validated {statistics.median(read):.3f} s, "
          f"rows_problems (env ids, each row's env built, the batch size) {statistics.median(checked):.3f} s, "
          f"total {statistics.median(read) + statistics.median(checked):.3f} s")


if __name__ == "__main__":
    main()
