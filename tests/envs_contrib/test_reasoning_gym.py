"""The reasoning-gym bridge: every reasoning-gym dataset is an id, its rows come from the dataset builder and
its rewards from reasoning-gym's own score_answer."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

reasoning_gym = pytest.importorskip(
    "reasoning_gym", reason="the reasoning_gym/* envs need reasoning-gym: pip install 'skyrl-gym[reasoning-gym]'")

import skyrl_gym  # noqa: E402
from skygym_contrib.reasoning_gym import answer_guard  # noqa: E402
from skygym_contrib.reasoning_gym.names import DATASETS  # noqa: E402
from skyrl_gym import datasets  # noqa: E402
from skyrl_gym.checker import check_env  # noqa: E402
from skyrl_gym.data import row_extras  # noqa: E402
from skyrl_gym.errors import DataError  # noqa: E402

IDS = [f"reasoning_gym/{name}" for name in sorted(DATASETS)]


def play(row, action):
    env = skyrl_gym.make(row["env_class"], extras=row_extras(row))
    env.init(row["prompt"])
    return env.step(action)


def test_the_static_list_matches_the_installed_reasoning_gym():
    assert sorted(DATASETS) == sorted(reasoning_gym.factory.DATASETS), (
        "envs_contrib/reasoning_gym/names.py is out of date with the installed reasoning-gym: add or remove names")


def test_every_dataset_is_registered_with_a_dataset_builder():
    for env_id in IDS:
        assert env_id in skyrl_gym.registry and datasets.has_dataset(env_id)
        assert skyrl_gym.spec(env_id).get_description().startswith("reasoning-gym ")


def test_registering_does_not_import_reasoning_gym():
    code = ("import sys, skyrl_gym; from skyrl_gym import datasets; "
            "assert 'reasoning_gym/sudoku' in skyrl_gym.registry and datasets.has_dataset('reasoning_gym/sudoku'); "
            "assert 'reasoning_gym' not in sys.modules, 'registration imported reasoning_gym'")
    subprocess.run([sys.executable, "-c", code], check=True)


# reasoning-gym takes seconds a puzzle to make these (knight_swap 10-20 s on a loaded 2-core machine): one row each
SLOW_TO_BUILD = {"reasoning_gym/knight_swap", "reasoning_gym/futoshiki", "reasoning_gym/sokoban",
                 "reasoning_gym/zebra_puzzles"}


@pytest.mark.parametrize("env_id", IDS)
def test_check_passes_on_rows_from_the_builder(env_id):
    rows = datasets.build_rows(env_id, split="test", size=1 if env_id in SLOW_TO_BUILD else 2, seed=0)
    report = check_env(env_id, rows, huge_action_chars=200_000)
    assert report.ok and not report.warnings, str(report)
    for row in rows:
        if row["reward_spec"]["ground_truth"] is not None:
            assert play(row, row["extra_info"]["reference_action"])["reward"] == 1.0
        for action in ("<answer>surely not the answer</answer>", "no tags at all"):
            output = play(row, action)
            assert output["reward"] == 1.0 or output["metadata"]["reason"], (action, output)


def test_wrong_and_missing_answers_say_why():
    row = datasets.build_rows("reasoning_gym/chain_sum", size=1, seed=3)[0]
    truth = row["reward_spec"]["ground_truth"]
    wrong = play(row, f"<answer>{int(truth) + 1}</answer>")
    assert wrong["reward"] == 0.0 and wrong["metadata"]["reason"].startswith("wrong answer")
    assert "no complete <answer>" in play(row, truth)["metadata"]["reason"]
    assert play(row, f"thinking... <answer>0</answer> no, <answer>{truth}</answer>")["reward"] == 1.0  # the last block


def test_a_hedged_answer_earns_no_containment_credit_unless_asked():
    """Found by `skyrl-gym audit`: reasoning-gym pays len(expected)/len(answer) to an answer that contains the
    expected one, so listing candidates ("-87, -88, -89") earned more than a wrong answer."""
    row = datasets.build_rows("reasoning_gym/chain_sum", size=1, seed=3)[0]
    truth = row["reward_spec"]["ground_truth"]
    hedge = f"<answer>{int(truth) + 1}, {truth}, {int(truth) - 1}</answer>"
    refused = play(row, hedge)
    assert refused["reward"] == 0.0 and "only contains it" in refused["metadata"]["reason"]
    env = skyrl_gym.make(row["env_class"], env_config={"containment_credit": True}, extras=row_extras(row))
    env.init(row["prompt"])
    assert 0.0 < env.step(hedge)["reward"] < 1.0  # reasoning-gym's own value, when asked for
    assert play(row, f"<answer>{truth}</answer>")["reward"] == 1.0


def test_a_hedge_the_scorer_normalises_before_its_containment_check_earns_nothing():
    """An attacker's pass: tsumego upper-cases the answer and manipulate_matrix joins its rows with single spaces
    before they look for the expected one in it, so a lower-case or extra-spaced list of candidates escaped a check
    of the raw text (0.25 and 0.43-0.50 against 0.05 and 0 for a wrong answer)."""
    row = datasets.build_rows("reasoning_gym/tsumego", split="test", size=1, seed=0)[0]
    truth = row["reward_spec"]["ground_truth"]
    for hedge in (f"a1 or {truth.lower()}", f"a1, b2, {truth.lower()}, c3", f"A1 or {truth}"):
        refused = play(row, f"<answer>{hedge}</answer>")
        assert refused["reward"] == 0.0 and "only contains it" in refused["metadata"]["reason"], (hedge, refused)
    row = datasets.build_rows("reasoning_gym/manipulate_matrix", split="test", size=1, seed=0)[0]
    truth = row["reward_spec"]["ground_truth"].strip().splitlines()
    wrong = [" ".join("0" for _ in line.split()) for line in truth]
    for hedge in ("\n".join(f"{line} " for line in wrong + truth), "\n".join(line.replace(" ", "  ") for line in wrong + truth)):
        refused = play(row, f"<answer>{hedge}</answer>")
        assert refused["reward"] == 0.0 and "only contains it" in refused["metadata"]["reason"], (hedge, refused)
    assert play(row, "<answer>" + "\n".join(f"{line} " for line in truth) + "</answer>")["reward"] == 1.0


def test_replies_that_skip_the_task_earn_nothing_where_the_scorer_would_pay_them():
    """An attacker's pass over every family: any text earned 1.0 in game_of_life_halting, an all-dead board 0.96-0.99
    in game_of_life, the number echoed 0.5 in prime_factorization, a premise copied 1.0 in propositional_logic."""
    import json
    import math

    for row in datasets.build_rows("reasoning_gym/game_of_life_halting", split="test", size=2, seed=0):
        truth = row["reward_spec"]["ground_truth"]
        other = "False" if truth == "True" else "True"
        for reply in ("banana", "True or False", other):
            said = play(row, f"<answer>{reply}</answer>")
            assert said["reward"] == 0.0 and "only the right word is paid" in said["metadata"]["reason"], reply
        assert play(row, f"<answer> {truth.lower()} </answer>")["reward"] == 1.0
    row = datasets.build_rows("reasoning_gym/game_of_life", split="test", size=1, seed=0)[0]
    board = json.loads(row["reward_spec"]["ground_truth"])
    dead = play(row, f"<answer>{json.dumps([[0] * len(line) for line in board])}</answer>")
    assert dead["reward"] == 0.0 and "only the exact board is" in dead["metadata"]["reason"]
    assert play(row, f"<answer>{row['reward_spec']['ground_truth']}</answer>")["reward"] == 1.0
    row = next(row for row in datasets.build_rows("reasoning_gym/prime_factorization", split="test", size=8, seed=0)
               if "×" in row["reward_spec"]["ground_truth"])
    number = math.prod(int(factor) for factor in row["reward_spec"]["ground_truth"].split("×"))
    for reply in (str(number), f"1 × {number}"):
        echoed = play(row, f"<answer>{reply}</answer>")
        assert echoed["reward"] == 0.0 and "not its prime factorization" in echoed["metadata"]["reason"], reply
    assert play(row, f"<answer>{row['reward_spec']['ground_truth']}</answer>")["reward"] == 1.0
    row = datasets.build_rows("reasoning_gym/propositional_logic", split="test", size=1, seed=0)[0]
    env = skyrl_gym.make(row["env_class"], extras=row_extras(row))
    for premise in env.entry["metadata"]["premises"]:
        copied = play(row, f"<answer>{premise}</answer>")
        assert copied["reward"] == 0.0 and "restates a premise" in copied["metadata"]["reason"], premise


def test_a_nan_a_prefix_a_dropped_sign_and_a_two_role_hedge_earn_what_wrong_answers_do():
    """A second attacker's pass: complex_arithmetic paid 1.0 for "nan", number_sorting for a list of NaNs, coin_flip
    for any prefix of the probability ("0"), gsm_symbolic for the number's negation or "642/7", knights_knaves 0.65
    for naming one person both roles."""
    import json

    def rows(family, size=3):
        return datasets.build_rows(f"reasoning_gym/{family}", split="test", size=size, seed=0)

    for row in rows("complex_arithmetic"):
        for reply in ("nan", "NaN + nan i"):
            said = play(row, f"<answer>{reply}</answer>")
            assert said["reward"] == 0.0 and "names NaN" in said["metadata"]["reason"], (reply, said)
        assert play(row, f"<answer>{row['reward_spec']['ground_truth']}</answer>")["reward"] == 1.0
    for row in rows("number_sorting"):
        truth = row["reward_spec"]["ground_truth"]
        said = play(row, f"<answer>{json.dumps(['NaN'] * len(json.loads(truth.replace(chr(39), chr(34)))))}"
                         "</answer>".replace('"', ""))
        assert said["reward"] == 0.0 and "names NaN" in said["metadata"]["reason"], said
        assert play(row, f"<answer>{truth}</answer>")["reward"] == 1.0
    for row in rows("coin_flip"):
        truth = row["reward_spec"]["ground_truth"]
        if float(truth) >= 0.1:  # "0" is a prefix of it
            prefix = play(row, "<answer>0</answer>")
            assert 0.0 < prefix["reward"] < 0.5 and "the longer one's" in prefix["metadata"]["reason"], prefix
        assert play(row, f"<answer>{truth}</answer>")["reward"] == 1.0
    for row in rows("gsm_symbolic"):
        truth = row["reward_spec"]["ground_truth"]
        for reply in (f"-{truth}", f"{truth}/7", f"{truth} or {int(float(truth)) + 1}"):
            said = play(row, f"<answer>{reply}</answer>")
            assert said["reward"] == 0.0 and "only the number is paid" in said["metadata"]["reason"], (reply, said)
        assert play(row, f"<answer> {truth} </answer>")["reward"] == 1.0
    from reasoning_gym.logic.knights_knaves import VALID_ROLES, KnightsKnavesDataset

    hedged = 0
    for row in rows("knights_knaves", size=4):
        truth = row["reward_spec"]["ground_truth"]
        assignments = sorted(KnightsKnavesDataset._normalize_answer(truth))
        if len(assignments) != 2:
            continue
        (name, role), other = assignments
        # one person, both roles: one of two pairs is right
        hedge = f"{name} is a {role}, {name} is a {next(r for r in sorted(VALID_ROLES) if r != role)}"
        said = play(row, f"<answer>{hedge}</answer>")
        assert said["reward"] == 0.0 and "two roles" in said["metadata"]["reason"], (hedge, said)
        assert play(row, f"<answer>{truth}</answer>")["reward"] == 1.0
        # one role right of two: reasoning-gym's 0.65, a share a blind guess earns (everyone the truthful role)
        half = f"{name} is a {role}, {other[0]} is a {next(r for r in sorted(VALID_ROLES) if r != other[1])}"
        said = play(row, f"<answer>{half}</answer>")
        assert said["reward"] == 0.0 and "reasoning-gym scored 0.65" in said["metadata"]["reason"], (half, said)
        hedged += 1
    assert hedged, "no two-person knights_knaves row among the first four"


def test_look_alike_digits_are_not_read_as_the_number():
    row = datasets.build_rows("reasoning_gym/chain_sum", size=1, seed=3)[0]
    truth = row["reward_spec"]["ground_truth"]
    fullwidth = truth.translate(str.maketrans("0123456789-", "０１２３４５６７８９－"))
    for spoofed in (fullwidth, truth.translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩"))):
        output = play(row, f"<answer>{spoofed}</answer>")
        assert output["reward"] == 0.0 and "look-alike" in output["metadata"]["reason"], spoofed


def test_a_scorer_that_cannot_parse_the_answer_gives_zero_with_its_error():
    row = datasets.build_rows("reasoning_gym/prime_factorization", size=1, seed=0)[0]
    output = play(row, "<answer>not a number</answer>")
    assert output["reward"] == 0.0 and "could not read the answer" in output["metadata"]["reason"]


EVALUATING = sorted(answer_guard.EVALUATED_AS_PYTHON | answer_guard.PARSED_BY_SYMPY)


@pytest.mark.parametrize("name", EVALUATING)
def test_an_answer_that_is_code_never_runs_in_the_env_process(name, tmp_path):
    """reasoning-gym's scorers read these datasets' answers with eval or sympy's parse_expr, in the trainer's
    or serve-env's own process: this answer ran a shell command there."""
    ran = tmp_path / "ran"
    row = datasets.build_rows(f"reasoning_gym/{name}", size=1, seed=0)[0]
    code = f"__import__('os').system('touch {ran}')"
    output = play(row, f"<answer>{code}</answer>")
    assert output["reward"] == 0.0 and "not scored" in output["metadata"]["reason"], output
    assert play(row, f"<answer>({code})!</answer>")["reward"] == 0.0  # sympy: x! is a call
    assert not ran.exists()
    assert play(row, row["extra_info"]["reference_action"])["reward"] == 1.0


def test_a_composite_guards_the_answer_as_its_source_dataset_would(tmp_path):
    ran = tmp_path / "ran"
    settings = {"datasets": [{"name": "string_insertion", "weight": 1.0, "config": {}}]}
    env = skyrl_gym.make("reasoning_gym/composite", env_config={"settings": settings, "seed": 0, "index": 0})
    env.init(None)
    output = env.step(f"<answer>__import__('os').system('touch {ran}')</answer>")
    assert output["reward"] == 0.0 and "would run it as Python code" in output["metadata"]["reason"]
    assert not ran.exists()


def test_a_name_from_the_scorers_own_frame_earns_no_credit():
    """string_insertion's scorer evaluated the answer in its frame: 'oracle_answer' there is the expected
    answer, which earned its 0.1 of partial credit."""
    row = datasets.build_rows("reasoning_gym/string_insertion", size=1, seed=0)[0]
    for answer in ("oracle_answer", "list(oracle_answer)"):
        output = play(row, f"<answer>{answer}</answer>")
        assert output["reward"] == 0.0 and "not a literal" in output["metadata"]["reason"], output


@pytest.mark.timeout(20)
def test_an_answer_sympy_would_compute_for_ever_is_not_scored():
    row = datasets.build_rows("reasoning_gym/countdown", size=1, seed=0)[0]
    for answer in ("9**9**9**9", "(9**99)**(9**99)", "2**" + "9" * 60):
        assert play(row, f"<answer>{answer}</answer>")["reward"] == 0.0


@pytest.mark.parametrize("name", EVALUATING)
def test_the_guard_lets_the_datasets_own_answers_through(name):
    dataset = reasoning_gym.create_dataset(name, seed=5, size=30)
    for index in range(30):
        entry = dataset[index]
        assert answer_guard.refusal(name, entry["answer"], entry["answer"]) is None, entry["answer"]


def test_every_scorer_that_evaluates_the_answer_is_guarded():
    """A reasoning-gym release that reads answers with eval or parse_expr in another dataset must extend the
    guard."""
    import inspect

    evaluating = set()
    for name in reasoning_gym.factory.DATASETS:
        dataset_class, _ = reasoning_gym.factory.DATASETS[name]
        source = inspect.getsource(dataset_class.score_answer)
        if re.search(r"(?<![\w.])eval\(|parse_expr\(|sympify\(", source):
            evaluating.add(name)
    evaluating.discard("number_sorting")  # it evaluates the entry's answer, not the model's
    assert evaluating <= set(EVALUATING), sorted(evaluating - set(EVALUATING))


def test_every_scorer_that_reads_the_answer_with_fraction_is_guarded():
    """Fraction computes 10**exponent for a decimal exponent: a release whose scorer reads answers with it in
    another dataset must extend the guard."""
    import inspect

    reading = {name for name, (dataset_class, _) in reasoning_gym.factory.DATASETS.items()
               if "Fraction(" in inspect.getsource(dataset_class.score_answer)}
    assert reading and reading <= answer_guard.PARSED_BY_FRACTION, sorted(reading - answer_guard.PARSED_BY_FRACTION)


@pytest.mark.timeout(60)
def test_an_answer_fraction_would_compute_for_ever_is_not_scored():
    """"1e10000000" (ten characters) held coin_flip's scorer for 20 s; one more digit, for half an hour."""
    row = datasets.build_rows("reasoning_gym/coin_flip", size=1, seed=0)[0]
    for answer in ("1e10000000", "1E+99999999", "1e4_000_000"):
        said = play(row, f"<answer>{answer}</answer>")
        assert said["reward"] == 0.0 and "decimal exponent over 400" in said["metadata"]["reason"], said
    assert play(row, f"<answer>{row['reward_spec']['ground_truth']}</answer>")["reward"] == 1.0
    assert play(row, "<answer>1e-5</answer>")["metadata"]["reason"].startswith(("wrong answer", "partial credit",
                                                                               "'1e-5' is not"))


def test_settings_seed_and_split_make_the_rows():
    easy = datasets.build_rows("reasoning_gym/chain_sum", size=3, seed=1, min_terms=2, max_terms=2, min_digits=1,
                               max_digits=1)
    assert all(re.search(r": \d [+-] \d =$", row["prompt"][1]["content"]) for row in easy)  # two one-digit terms
    assert datasets.build_rows("reasoning_gym/chain_sum", size=2, seed=1, min_terms=2, max_terms=2, min_digits=1,
                               max_digits=1) == easy[:2]
    train = datasets.build_rows("reasoning_gym/chain_sum", split="train", size=3, seed=1)
    test = datasets.build_rows("reasoning_gym/chain_sum", split="test", size=3, seed=1)
    assert [r["prompt"] for r in train] != [r["prompt"] for r in test]
    assert datasets.rebuild_row(easy[2]["extra_info"]["origin"]) == easy[2]
    with pytest.raises(ValueError, match="no setting.*max_terms"):
        datasets.build_rows("reasoning_gym/chain_sum", size=1, seed=0, max_term=3)


@pytest.mark.parametrize("name", ["tower_of_hanoi", "coin_flip", "string_splitting"])
def test_no_question_is_in_two_splits(name):
    """Seeded apart, these repeated train questions in their test split (14, 7 and 2 of the first 20 test rows were
    among the first 100 train rows): a question now belongs to one split, by its hash."""
    env_id = f"reasoning_gym/{name}"
    overlap = datasets.split_overlap(env_id, test_size=20, train_size=100, seed=0)
    assert (overlap.shared, overlap.test_rows, overlap.train_rows) == ([], 20, 100)
    for split in datasets.GENERATED_SPLITS:
        questions = [row["prompt"][1]["content"] for row in datasets.build_rows(env_id, split=split, size=30, seed=1)]
        assert {datasets.split_of(question) for question in questions} == {split}


def test_each_row_has_an_entry_of_its_own():
    """Most reasoning-gym datasets draw item j of the dataset seeded s from Random(s + j): seeding the chunks of 500
    entries s, s + 1, ... made train row 500 repeat row 1 (494 distinct questions in 1000 chain_sum rows), and the
    spare entries of test rows 10 apart overlapped (27 distinct in 100)."""
    train = datasets.build_rows("reasoning_gym/chain_sum", split="train", size=600, seed=0)
    test = datasets.build_rows("reasoning_gym/chain_sum", split="test", size=200, seed=0)
    for rows in (train, test):
        entries = {(row["reward_spec"]["seed"], row["reward_spec"]["index"]) for row in rows}
        questions = {row["prompt"][1]["content"] for row in rows}
        assert len(entries) == len(rows) and len(questions) >= 0.98 * len(rows)  # short sums repeat by chance


def test_a_create_finds_its_question_within_its_budget():
    """A client chooses the seed and index of an env made from env_config: its tries end within a budget."""
    from skygym_contrib.reasoning_gym import generate

    settings = generate.settings_json({"min_value": 2, "max_value": 3, "min_numbers": 2, "max_numbers": 2})
    with pytest.raises(generate.SettingsError, match="500 draws gave no task of the 'validation' split"):
        generate.find("gcd", settings, 0, "validation", 0)  # no budget: build_rows's rows never depend on the clock
    with pytest.raises(generate.SettingsError, match="took more than 0 s.*slow to generate, or make few questions"):
        generate.find("gcd", settings, 0, "validation", 0, budget_s=0.0)  # the settings tried: its first try only


def test_settings_that_leave_a_split_no_question_are_refused_naming_it():
    settings = {"min_value": 2, "max_value": 3, "min_numbers": 2, "max_numbers": 2}  # four questions in all
    built = {}
    for split in datasets.GENERATED_SPLITS:
        try:
            built[split] = datasets.build_rows("reasoning_gym/gcd", split=split, size=2, seed=0, **settings)
        except ValueError as exc:
            assert f"no task of the {split!r} split" in str(exc) and "make the task space larger" in str(exc)
            built[split] = None
    assert built["train"] and None in built.values()  # four questions: at least one split has none
    with pytest.raises(DataError, match="no task of the 'validation' split"):
        skyrl_gym.make("reasoning_gym/gcd", env_config={"settings": settings, "split": "validation"})


def test_the_env_makes_its_own_question_from_env_config():
    env = skyrl_gym.make("reasoning_gym/gcd", env_config={"seed": 5, "index": 2, "settings": {"max_value": 50}})
    prompt, _ = env.init([{"role": "user", "content": "Hello."}])
    assert "<answer>" in prompt[0]["content"] and "GCD" in prompt[1]["content"].upper()
    row = datasets.build_rows("reasoning_gym/gcd", split="train", size=3, seed=5, max_value=50)[2]
    assert prompt == row["prompt"]
    test = skyrl_gym.make("reasoning_gym/gcd", env_config={"seed": 5, "index": 4, "split": "test"})
    assert test.init([])[0] == datasets.build_rows("reasoning_gym/gcd", split="test", size=5, seed=5)[4]["prompt"]
    with pytest.raises(DataError, match="not 'tset'"):
        skyrl_gym.make("reasoning_gym/gcd", env_config={"split": "tset"})


def test_rows_from_another_reasoning_gym_version_are_refused():
    row = datasets.build_rows("reasoning_gym/chain_sum", size=1, seed=0)[0]
    row["reward_spec"]["ground_truth"] = "12345"
    with pytest.raises(DataError, match="build them again"):
        skyrl_gym.make("reasoning_gym/chain_sum", extras=row_extras(row))


def test_a_row_without_a_reasoning_gym_entry_is_refused():
    with pytest.raises(DataError, match="names no reasoning-gym entry"):
        skyrl_gym.make("reasoning_gym/gcd", extras={"reward_spec": {"method": "rule", "ground_truth": "6"}})


@pytest.mark.parametrize("where", ["row", "env_config", "composite"])
def test_a_setting_that_names_a_file_outside_the_package_is_refused_unread(where, tmp_path):
    """spell_backward opens its data_file from reasoning-gym's package folder, where an absolute path reaches any
    file: a row's settings read a secret's words back through the reward's reason and error text, and /dev/zero
    filled memory. A plain name (what the package ships) still works."""
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2secret\nAPIKEY12\n")
    shipped = datasets.build_rows("reasoning_gym/spell_backward", size=1, seed=0, data_file="words3to10.txt")[0]
    for path in (str(secret), "/dev/zero", "../../../../" + str(secret), "./words3to10.txt"):
        settings = {"data_file": path, "max_word_len": 1000}
        if where == "row":
            row = dict(shipped, reward_spec=dict(shipped["reward_spec"], settings=settings))
            build = lambda: skyrl_gym.make("reasoning_gym/spell_backward", extras=row_extras(row))  # noqa: E731
        elif where == "env_config":
            build = lambda: skyrl_gym.make("reasoning_gym/spell_backward",  # noqa: E731
                                           env_config={"seed": 0, "index": 0, "settings": settings})
        else:
            composite = {"datasets": [{"name": "spell_backward", "weight": 1, "config": settings}]}
            build = lambda: skyrl_gym.make("reasoning_gym/composite",  # noqa: E731
                                           env_config={"seed": 0, "index": 0, "settings": composite})
        with pytest.raises(DataError, match="must be the plain name of a file reasoning-gym ships") as refused:
            build()
        assert "21YEKIPA" not in str(refused.value) and "terces2retnuh" not in str(refused.value)
    env = skyrl_gym.make("reasoning_gym/spell_backward", extras=row_extras(shipped))
    env.init(shipped["prompt"])
    assert env.step(f"<answer>{shipped['reward_spec']['ground_truth']}</answer>")["reward"] == 1.0


def test_a_missing_shipped_file_is_refused_without_the_folder_it_was_looked_for_in(fresh_vets):
    """The refusal reaches serve-env's clients: "No such file or directory: '/root/.cache/.../site-packages/
    reasoning_gym/data/nonexistent.txt'" told a client where the server is installed (an attacker's pass)."""
    with pytest.raises(DataError, match="No such file or directory: 'nonexistent.txt'") as refused:
        skyrl_gym.make("reasoning_gym/spell_backward",
                       env_config={"seed": 0, "index": 0, "settings": {"data_file": "nonexistent.txt"}})
    assert "site-packages" not in str(refused.value) and "/nonexistent.txt" not in str(refused.value)


@pytest.fixture
def fresh_vets(monkeypatch):
    """No verdict of an earlier test: each test tries its settings itself."""
    import collections

    from skygym_contrib.reasoning_gym import generate

    monkeypatch.setattr(generate, "_vetted", collections.OrderedDict())
    generate.dataset.cache_clear()
    generate._cached_entry.cache_clear()
    generate.close_children()  # a child started with other bounds
    yield generate
    generate.dataset.cache_clear()
    generate._cached_entry.cache_clear()
    generate.close_children()


def test_settings_that_would_build_a_huge_question_are_refused_after_a_bounded_try(fresh_vets):
    """reasoning-gym checks little of its settings, which rows and serve-env's clients choose: rotate_matrix with
    min_n = max_n = 20000 built a 400-million-cell question on the caller's thread (8 minutes here, and memory
    to match). Settings other than the defaults are first tried in a child process with bounds."""
    settings = {"min_n": 1500, "max_n": 1500}  # a 4.5-million-character question
    with pytest.raises(DataError, match=r"question is 4,500,\d+ characters long; at most 200,000"):
        skyrl_gym.make("reasoning_gym/rotate_matrix", env_config={"settings": settings})
    row = datasets.build_rows("reasoning_gym/rotate_matrix", size=1, seed=0)[0]
    hostile = dict(row, reward_spec=dict(row["reward_spec"], settings=settings))
    with pytest.raises(DataError, match="at most 200,000"):  # a row's settings: the refusal was remembered
        skyrl_gym.make("reasoning_gym/rotate_matrix", extras=row_extras(hostile))
    with pytest.raises(ValueError, match="at most 200,000"):
        datasets.build_rows("reasoning_gym/rotate_matrix", size=1, seed=0, **settings)


def test_a_composites_components_are_each_tried_so_a_rare_one_cannot_hide(fresh_vets):
    """A try of a whole composite draws eight entries: rotate_matrix at n = 20000 with a weight of 0.02 beside
    chain_sum passed it, and a seed that drew it built the question the try was there to stop."""
    hiding = {"datasets": [{"name": "chain_sum", "weight": 1.0, "config": {"max_terms": 4}},
                           {"name": "rotate_matrix", "weight": 0.02, "config": {"min_n": 1500, "max_n": 1500}}]}
    with pytest.raises(DataError, match="'rotate_matrix'.*at most 200,000"):
        skyrl_gym.make("reasoning_gym/composite", env_config={"settings": hiding, "seed": 153})


def test_the_try_is_bounded_in_time_and_memory_and_smaller_numbers_are_tried_too(fresh_vets, monkeypatch):
    generate = fresh_vets
    monkeypatch.setattr(generate, "VET_S", 3.0)
    with pytest.raises(generate.SettingsError, match="took more than 3 s to generate 8 entries"):
        generate.vet("rotate_matrix", '{"max_n": 20000, "min_n": 20000}')
    # a smaller number is no cheaper: puzzle24 draws until four numbers make 24, which four 1s never do
    assert not generate._is_default("puzzle24", {"max_value": 1})
    with pytest.raises(DataError, match="took more than 3 s"):
        skyrl_gym.make("reasoning_gym/puzzle24", env_config={"settings": {"max_value": 1}})
    assert generate._vetted == {}  # time-outs are not remembered: a busy machine can cause one
    monkeypatch.setattr(generate, "VET_MEMORY_BYTES", 64 << 20)
    monkeypatch.setattr(generate, "MAX_QUESTION_CHARS", 10**9)
    monkeypatch.setattr(generate, "VET_S", 60.0)
    with pytest.raises(generate.SettingsError, match="needs more than 64 MiB of memory"):
        generate.vet("rotate_matrix", '{"max_n": 1900, "min_n": 1900}')


def test_a_composites_parts_share_one_wait_and_a_retry_goes_on_from_the_parts_tried(fresh_vets, monkeypatch):
    """Each part of a composite waited up to three minutes for its own try, so one create of many parts held a
    server thread for that many times three minutes (a review). The parts now share one deadline, and no try
    starts that could run past it. Each try may take 10 s and the create has 13: the first try is over at once,
    which leaves 3 s for the second to start in; it takes 3.5 s, so the third could end past the deadline (tries of
    1 s each in a 2.5 s create left 0.5 s to a loaded machine)."""
    import time

    generate = fresh_vets
    monkeypatch.setattr(generate, "VET_S", 10.0)
    monkeypatch.setattr(generate, "VET_WAIT_S", 13.0)
    tried = []
    monkeypatch.setattr(generate, "_vet_in_child_process", lambda name, settings: tried.append(name) or time.sleep(
        3.5 if name == "basic_arithmetic" else 0) or (None, True))
    parts = {"datasets": [{"name": name, "weight": 1.0, "config": {"max_terms": 4}}
                          for name in ("chain_sum", "basic_arithmetic", "products")]}
    started = time.monotonic()
    with pytest.raises(DataError, match="could not be tried within the create's 13 s.*parts share"):
        skyrl_gym.make("reasoning_gym/composite", env_config={"settings": parts})
    assert time.monotonic() - started < 13  # the third try would have ended past the deadline: not started
    assert tried == ["chain_sum", "basic_arithmetic"]
    # the third try, a child to generate the entry and the composite's build share the create's time: room for all
    monkeypatch.setattr(generate, "VET_WAIT_S", 60.0)
    skyrl_gym.make("reasoning_gym/composite", env_config={"settings": parts})  # the first two are remembered
    assert tried == ["chain_sum", "basic_arithmetic", "products"]


def test_only_settings_other_than_the_defaults_are_tried_and_each_once(fresh_vets, monkeypatch):
    generate = fresh_vets
    tried = []
    real = generate._vet_in_child_process
    monkeypatch.setattr(generate, "_vet_in_child_process", lambda *a: tried.append(a) or real(*a))
    skyrl_gym.make("reasoning_gym/rotate_matrix", env_config={"settings": {"min_n": 2, "max_n": 10}})  # defaults
    skyrl_gym.make("reasoning_gym/composite", env_config={"settings": {}})
    assert tried == []
    for index in range(3):
        skyrl_gym.make("reasoning_gym/rotate_matrix", env_config={"settings": {"max_n": 12}, "index": index})
    assert tried == [("rotate_matrix", '{"max_n": 12}')]


def test_each_entry_of_tried_settings_is_generated_apart_within_the_same_bounds(fresh_vets, monkeypatch):
    """The try draws eight entries of seed 0, and those draws can be searched for settings whose tried entries are
    small while others are not: each entry of such settings is generated in a child process under the try's bounds
    too. Here the try is taken as passed, as it would be for settings found by such a search."""
    generate = fresh_vets
    monkeypatch.setattr(generate, "_vet_in_child_process", lambda name, settings: (None, True))
    huge = {"min_n": 1500, "max_n": 1500}  # a 4.5-million-character question
    with pytest.raises(DataError, match=r"entry 0 of seed \d+ .* refused: entry 0's question is 4,500,\d+ characters"):
        skyrl_gym.make("reasoning_gym/rotate_matrix", env_config={"settings": huge})
    monkeypatch.setattr(generate, "VET_S", 2.0)
    with pytest.raises(DataError, match=r"entry 1 of seed \d+ .* took more than 2 s to generate"):
        skyrl_gym.make("reasoning_gym/rotate_matrix", env_config={"settings": {"min_n": 20000, "max_n": 20000},
                                                                  "index": 1})
    assert generate._idle_children == []  # each child that passed a bound was ended
    monkeypatch.setattr(generate, "VET_S", 60.0)  # 2 s for each entry below was little on a loaded machine
    # the next entry gets a new child, and an entry made apart is the one this process would make
    settings = generate.settings_json({"min_n": 3, "max_n": 6})
    apart = [generate.entry("rotate_matrix", settings, 11, index) for index in range(4)]
    assert apart == [generate._build("rotate_matrix", settings, 11)[index] for index in range(4)]
    assert len(generate._idle_children) == 1
    env = skyrl_gym.make("reasoning_gym/rotate_matrix", env_config={"settings": {"min_n": 3, "max_n": 6}})
    env.init()
    assert env.step(f"<answer>{env.entry['answer']}</answer>")["reward"] == 1.0


def test_reasoning_gyms_work_in_this_process_runs_one_at_a_time(fresh_vets, monkeypatch):
    """Building datasets and generating entries is Python holding the GIL: sixteen creates of new seeds at once took
    the steps of a server's other sessions from 2 ms to over a second (an attacker's pass)."""
    import threading
    import time

    generate = fresh_vets
    running, most = [0], [0]
    lock = threading.Lock()
    real_build = generate._build

    def counting_build(name, settings, seed, construct=True):
        make = real_build(name, settings, seed, construct=False)

        def construct_counted():
            with lock:
                running[0] += 1
                most[0] = max(most[0], running[0])
            time.sleep(0.2)
            try:
                return make()
            finally:
                with lock:
                    running[0] -= 1
        return construct_counted() if construct else construct_counted

    monkeypatch.setattr(generate, "_build", counting_build)
    made = []
    threads = [threading.Thread(target=lambda seed=seed: made.append(
        skyrl_gym.make("reasoning_gym/chain_sum", env_config={"seed": seed}))) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(made) == 4 and most[0] == 1 and running[0] == 0


def test_a_forked_process_never_reads_its_parents_child(fresh_vets):
    """A forked process (a DataLoader worker) inherited the parent's idle child and its pipes: both wrote to it and
    read each other's answers, and a caller got another seed's entry without an error (a review)."""
    import os

    generate = fresh_vets
    settings = generate.settings_json({"min_n": 3, "max_n": 6})
    generate.entry("rotate_matrix", settings, 5, 0)
    assert len(generate._idle_children) == 1  # the parent's child, idle

    def right(seed):
        return all(generate.entry("rotate_matrix", settings, seed, index) ==
                   generate._build("rotate_matrix", settings, seed)[index] for index in range(30))

    pid = os.fork()
    if pid == 0:  # the forked process: its own child, its own answers
        try:
            os._exit(0 if right(7) and [c.parent for c in generate._idle_children] == [os.getpid()] else 1)
        except BaseException:
            os._exit(2)
    parent_right = right(9)
    _, status = os.waitpid(pid, 0)
    assert parent_right and os.waitstatus_to_exitcode(status) == 0


def test_settings_longer_than_an_argument_can_hold_are_tried_too(fresh_vets):
    """The child got the settings as an argument, which holds at most 128 KiB: a longer settings object raised
    OSError ("Argument list too long") out of the env's constructor."""
    generate = fresh_vets
    settings = generate.settings_json({"max_terms": 4, "x" * 200_000: 1})
    refusal, lasting = generate._vet_in_child_process("chain_sum", settings)
    assert "has no setting(s) ['xxx" in refusal and lasting  # the child read them, and said what is wrong


def test_partial_credit_false_pays_only_a_full_score():
    """word_sorting pays a third for the words echoed in the order given (its stated rule, kept by default): a
    shortcut a policy can learn, which env_config partial_credit=false does not pay."""
    row = datasets.build_rows("reasoning_gym/word_sorting", size=1, seed=0)[0]
    truth = row["reward_spec"]["ground_truth"]
    words = truth.split(", ")
    echoed = f"<answer>{', '.join(sorted(words, key=lambda w: row['prompt'][-1]['content'].rindex(w)))}</answer>"

    def played(action, **config):
        env = skyrl_gym.make(row["env_class"], extras=row_extras(row), env_config=config or None)
        env.init(row["prompt"])
        return env.step(action)

    paid = played(echoed)
    assert 0.0 < paid["reward"] < 1.0 and paid["metadata"]["reason"].startswith("partial credit")
    refused = played(echoed, partial_credit=False)
    assert refused["reward"] == 0.0 and "partial_credit=false pays only a full score" in refused["metadata"]["reason"]
    assert played(f"<answer>{truth}</answer>", partial_credit=False)["reward"] == 1.0


@pytest.mark.timeout(30)  # a hang guard: the old pattern took 4.9 s an answer here, the new one milliseconds
def test_the_exponent_check_takes_no_time_on_hostile_spacing():
    """A ReDoS scan: coin_flip's answer "e" and 20,000 spaces took 4.9 s to check, in the trainer's own process."""
    hostile = "e" + " " * 19_998 + "x"
    for _ in range(20):
        answer_guard.refusal("coin_flip", hostile)
    assert answer_guard._EXPONENT.findall("1e - 5, 2E+_7, 3e 12") == ["5", "7", "12"]
