"""Reward functions: values compatible with SkyRL-gym, robust on adversarial text."""

from __future__ import annotations

import threading
import time

import pytest

from skyrl_gym.rewards.boxed import last_boxed_content, last_boxed_only_string, remove_boxed
from skyrl_gym.rewards.gsm8k import compute_score, extract_solution
from skyrl_gym.rewards.math import compute_math_score, math_equal
from skyrl_gym.rewards.normalize import minerva_match, normalize_final_answer
from skyrl_gym.rewards.squad import exact_match, normalize_answer


@pytest.mark.parametrize(
    "text, strict, flexible",
    [
        ("so the answer is\n#### 1,234", "1234", "1,234"),  # flexible keeps commas, as in veRL
        ("#### -7.5 and later #### 3", "-7.5", "3"),
        ("The total is $18.", None, "18."),
        ("no numbers here", None, None),
        ("#### $5", None, "5"),
    ],
)
def test_gsm8k_extraction(text, strict, flexible):
    assert extract_solution(text, "strict") == strict
    assert extract_solution(text, "flexible") == flexible


def test_gsm8k_scores():
    assert compute_score("#### 18", "18") == 1.0
    assert compute_score("#### 17", "18") == 0.0
    assert compute_score("#### 17", "18", format_score=0.04) == 0.04
    assert compute_score("18", "18") == 0.0  # strict needs the #### marker
    assert compute_score("... 18", "18", method="flexible") == 1.0
    with pytest.raises(ValueError, match="unknown GSM8K extraction method"):
        extract_solution("x", "fuzzy")


def test_boxed_extraction_with_nesting_and_unfinished_boxes():
    assert last_boxed_only_string(r"a \boxed{\frac{1}{2}} b") == r"\boxed{\frac{1}{2}}"
    assert last_boxed_content(r"\boxed{1} then \boxed{\sqrt{\frac{a}{b}}}") == r"\sqrt{\frac{a}{b}}"
    assert last_boxed_content(r"answer \boxed{42} and a cut-off \boxed{4") == "42"
    assert last_boxed_content(r"put it in \boxed{}") is None
    assert last_boxed_content(r"\fbox{7}") == "7"
    assert last_boxed_content(r"$\boxed 9$") == "9"
    assert last_boxed_content("nothing") is None
    assert remove_boxed(r"\boxed{x}") == "x"
    with pytest.raises(ValueError, match="not a boxed expression"):
        remove_boxed("x")


@pytest.mark.timeout(20)
def test_boxed_extraction_is_linear_in_unclosed_boxes():
    """Each unclosed box was searched to the end of the text: 100,000 characters of ``\\boxed{`` (what a
    model in a loop writes) held a math, multiply or code_interpreter step 30-40 s; 700,000, hours."""
    tail = "\\boxed{" * 100_000
    assert last_boxed_content("\\boxed{42} then " + tail) == "42"
    assert last_boxed_content("\\fbox{7}" + tail.replace("boxed", "fbox")) == "7"
    assert last_boxed_content(tail) is None
    assert last_boxed_content(("\\boxed " + " " * 50 + "$") * 20_000) is None


@pytest.mark.parametrize("text", ["\\boxed $5$", "x \\boxed  $", "The answer is $\\boxed $42"])
def test_boxed_space_form_without_a_token_is_no_answer(text):
    """``\\boxed`` then a space then ``$`` raised IndexError, and with it the step of every boxed env."""
    assert last_boxed_content(text) is None
    assert compute_math_score(text, "42")["score"] == 0.0


@pytest.mark.parametrize(
    "raw, normalized",
    [
        ("10 degrees", "10"),
        (r"\text{5 cm}", "5"),
        ("1,000", "1000"),
        (r"x = \frac12", r"\frac{1}{2}"),
        (r"\boxed{\sqrt2}", r"\sqrt{2}"),
        (r"$\$3.50$", "3.50"),
    ],
)
def test_minerva_normalisation(raw, normalized):
    assert normalize_final_answer(raw) == normalized


def test_minerva_match_reads_the_answer_line():
    assert minerva_match("work...\nAnswer: \\boxed{204}", "204") == (True, "204")
    assert minerva_match("no answer line", "204") == (False, "[INVALID]")


def test_squad_normalisation_and_exact_match():
    assert normalize_answer("The  Eiffel Tower!") == "eiffel tower"
    assert exact_match("the eiffel tower", ["Eiffel Tower", "Paris"])
    assert exact_match("Paris.", "paris")
    assert not exact_match("London", ["Paris"])


def test_math_equivalence_with_math_verify():
    assert math_equal("0.5", r"\frac{1}{2}").equal
    assert math_equal(r"\frac{\sqrt{2}}{2}", r"\frac{1}{\sqrt{2}}").equal
    assert not math_equal(r"\frac{1}{3}", r"\frac{1}{2}").equal
    assert math_equal("3", "3.0").reason == "numeric"
    # a wrong answer's reason says why, not only which check ran (a new user read "math-verify" as a pass)
    assert math_equal("3", "4").reason == "numeric: not the same number as the ground truth"
    assert math_equal("0.6667", "2/3").reason == "math-verify: not the same value as the ground truth"
    assert compute_math_score(r"so \boxed{0.5}", r"\frac{1}{2}")["score"] == 1.0
    assert compute_math_score("no box", "1") == {"score": 0.0, "pred": None, "reason": "no \\boxed{} answer"}


@pytest.mark.parametrize("hedge", [r"$19$ 18", r"$19$ \text{ or } 18", r"$18$ 19", r"19 \text{ or } x = 18",
                                   r"18 \text{ or } x = 19", r"y = 19 \text{ or } x = 18", r"$$19$$ 18"])
def test_one_answer_naming_two_values_is_paid_for_neither(hedge):
    """The string shortcut and math-verify once read different parts of one answer (the first $...$ span, what
    follows the last "=", the last value), so "$19$ 18" was paid for a ground truth of 19 and of 18."""
    for gold in ("18", "19"):
        assert not math_equal(hedge, gold).equal, (hedge, gold)
        assert compute_math_score(rf"The answer is \boxed{{{hedge}}}", gold)["score"] == 0.0


def test_dollar_signs_and_equations_around_one_value_are_still_that_value():
    for answer in (r"$18$", r"\$18", r"18 \text{ dollars}", r"x = 18", r"x=18", r"\text{Area} = 18", r"$x = 18$"):
        assert math_equal(answer, "18").equal, answer
        assert not math_equal(answer, "19").equal, answer
    assert math_equal(r"n = \frac{1}{2}", "0.5").equal and math_equal(r"y = 2x + 1", "2x+1").equal
    assert math_equal("$$", "1").reason == "empty answer"


@pytest.mark.parametrize("answer, golds", [
    (r"5\text{}^2", ("5", "25")), (r"4\text{}^3", ("4", "64")), (r"1\;7", ("17", "8")), (r"1\ 7", ("17", "8")),
    (r"1\ldots7", ("17", "8")), (r"1\dots 7", ("17", "7")), (r"1\text{7}", ("17", "1")), (r"1,7", ("17", "1, 7")),
    (r"1{,}7", ("17", "1, 7")), (r"1\overline{7}", ("17", "1")), (r"\text{1}7", ("17", "1")),
    # a third pass: a degree sign or a word between digits, deleted or made a comma by the normaliser
    (r"12^\circ 30", ("1230", "42")), (r"1^{\circ}2^{\circ}3", ("123", "6")), (r"1^\circ8", ("18", "9")),
    (r"1 \text{ and } 8", ("18", "1, 8")), (r"1 \text{ and } 2 \text{ and } 3", ("123", "1, 2, 3")),
    (r"1,\text{and} 8", ("18", "1, 8")), (r"1\mbox{ and }8", ("18", "1, 8")),
    # a fourth: what the normaliser deletes, put between the digits and the patterns above (a quote, \text{}, a unit
    # word, a space)
    (r'12^\circ"30', ("1230", "42")), (r"12^\circ\text{}30", ("1230", "42")), (r"12^{\circ}\mathrm{th}30", ("1230", "42")),
    (r"1 \text{ and }\text{} 8", ("18", "1, 8")), (r'1"\text{ and } 8', ("18", "1, 8")), ("1 8", ("18", "9")),
    ("12 34", ("1234", "46")), ("1a 8", ("18", "1")), ("2 feet 6 inches", ("26", "30")),
    ("3 dollars 50 cents", ("350", "3.5")), ("2 hours 30 minutes", ("230", "150")),
])
def test_one_answer_is_paid_for_one_of_two_ground_truths_at_most(answer, golds):
    """Minerva's normalisation deleted or unwrapped what math-verify reads (a unit's power, spacing, dots, commas,
    \text{} between digits), so the string check paid one ground truth and math-verify another: "5\text{}^2" for a
    side of 5 and an area of 25 (an attacker's pass found eleven such pairs)."""
    paid = [gold for gold in golds if compute_math_score(rf"so \boxed{{{answer}}}", gold)["score"] == 1.0]
    assert len(paid) <= 1, (answer, paid)
    assert golds[0] not in paid  # the value the normaliser made of it is not the one read


def test_integers_are_compared_exactly_and_commas_only_group_thousands():
    assert not math_equal("1000000000999", "1000000000000").equal  # math.isclose's 1e-9 let 999 through
    assert not math_equal("123456789100", "123456789012").equal
    assert math_equal("1,000,000", "1000000").equal and math_equal("1,234.5", "1234.5").equal
    assert math_equal(r"1{,}000", "1000").equal and math_equal("18.0", "18").reason == "numeric"
    for answer, gold in (("17", "1, 7"), ("23", "2, 3"), ("1,7", "17"), ("12,34", "1234")):
        assert not math_equal(answer, gold).equal, (answer, gold)



@pytest.mark.parametrize("reply, golds", [
    (r"So the answer is \boxed{-\boxed${5}$}.", ("5", "-5")), (r"\boxed{\frac{1}{\boxed${5}$}}", ("5", r"\frac{1}{5}")),
    (r"\boxed{\boxed${3}$+\sqrt2}", ("3", r"3+\sqrt{2}")),
])
def test_a_box_inside_the_answer_is_paid_for_nothing(reply, golds):
    """A third pass: an inner box the extraction passes over (followed by $) was unwrapped by the normaliser and read
    alone by math-verify, so "-\boxed{5}" was paid for 5 and for -5: which sign, hedged."""
    for gold in golds:
        scored = compute_math_score(reply, gold)
        assert scored["score"] == 0.0 and scored["reason"] == "a box inside the answer", (reply, gold, scored)


@pytest.mark.parametrize("answer, gold", [
    ("1.6e-19", r"1.6\times10^{-19}"), ("6.02 \\times 10^{23}", "6.02e23"), ("-1.6E+3", r"-1.6\times 10^{3}"),
    (r"0.\overline{3}", r"\frac13"), (r"0.1\overline{6}", r"\frac{1}{6}"), (r"-1.\overline{142857}", r"-\frac87"),
    (r"\frac13", r"0.\overline{3}"),
])
def test_scientific_notation_and_repeating_decimals_are_read_as_the_values_they_name(answer, gold):
    """math-verify reads the e of "1.6e-19" as Euler's number and the bar of "0.\\overline{3}" as a conjugate: both
    were refused for the value they name."""
    assert math_equal(answer, gold).equal, (answer, gold)


@pytest.mark.parametrize("answer, gold", [
    ("1.0e-19", "0"), ("1e-19", r"0.0"), ("1.6e-19", r"1.7\times10^{-19}"), (r"0.\overline{3}", "0.333"),
    (r"0.\overline{3}", r"\frac{1}{3} + 10^{-13}"), (r"0.\overline{6}", r"\frac13"),
    (r"1 2.\overline{3}", r"\frac{37}{3}"),  # two numbers, not 12.333... (a review: spaces were dropped first)
])
def test_scientific_notation_and_repeating_decimals_pay_only_their_exact_value(answer, gold):
    assert not math_equal(answer, gold).equal, (answer, gold)


def test_odd_ground_truths_in_scientific_notation_or_repeating_are_a_verdict_not_an_exception():
    """Decimal reads "1e" + 4,400 zeros + "5"; int() refuses a string past 4,300 digits and raised out of
    math_equal (a review). Only a row can be that long: a reply is cut at 2,000 characters."""
    for gold in ("1e" + "0" * 4400 + "5", "1e-" + "0" * 5000 + "7", "0." + "1" * 5000 + r"\overline{3}"):
        assert not math_equal("7", gold).equal
    assert math_equal("1e000", "1").equal and math_equal("5e-0", r"5 \times 10^{0}").equal


def test_a_percentage_is_paid_for_its_number_as_an_integer_one_is():
    """math-verify paid 50\\% for 50 but not 33.3\\% for 33.3 (its rule is for integers): a decimal percentage
    was refused for a ground truth of its number, and the number for a ground truth written as a percentage."""
    for answer, gold in (("33.3\\%", "33.3"), ("33.3", "33.3\\%"), ("12.5 percent", "12.5"), ("12.5%", "12.5"),
                         ("50\\%", "50"), ("33.3\\%", "0.333")):
        assert math_equal(answer, gold).equal, (answer, gold)
    for answer, gold in (("33.3\\%", "33.4"), ("33.3\\%", "3.33"), ("12.5\\%", "12.5\\%%")):
        assert not math_equal(answer, gold).equal, (answer, gold)


def test_an_article_the_normaliser_deletes_is_not_deleted_from_a_variable():
    """Minerva's normaliser deletes "a " and "an " as words: "-b" was paid for a ground truth of "a - b"."""
    for answer, gold in (("-b", "a - b"), ("2 + 1", "2a + 1"), ("b", "a b"), ("5", "a 5")):
        assert not math_equal(answer, gold).equal, (answer, gold)
    assert math_equal("a 5", "5a").equal  # as math-verify reads it
    assert math_equal(r"\text{an equilateral triangle}", r"\text{equilateral triangle}").reason == "string"


@pytest.mark.timeout(30)  # a hang guard: the old pattern took 10 s here, the new one milliseconds
def test_the_patterns_run_in_the_callers_process_take_no_time_on_hostile_spacing():
    """A third pass: "1", 665 spaces, a comma, 1,332 spaces made the comma pattern backtrack cubically in the
    trainer's own process (10.8 s for one reply, outside math-verify's time limit)."""
    from skyrl_gym.rewards.math import _VALUE_CHANGING

    for text in ("1" + " " * 665 + "," + " " * 1332 + "x", "^" + " " * 1998 + "x", "1" + " " * 1998 + "}"):
        for _ in range(20):
            _VALUE_CHANGING.search(text)


def test_decimals_are_compared_exactly_whatever_way_they_are_written():
    """The number check compared any decimal with math.isclose (1e-9 relative and absolute): 1000000000999.0 was paid
    for 1000000000000 and 1e-10 for 0 (an attacker's pass)."""
    for answer, gold in (("1000000000999.0", "1000000000000"), ("1000000001.0", "1000000000"), ("1e-10", "0"),
                         ("1099511627700.0", "1099511627776"), ("1e12", "1000000000001"), ("0.1000000001", "0.1")):
        assert not math_equal(answer, gold).equal, (answer, gold)
        assert compute_math_score(rf"\boxed{{{answer}}}", gold)["score"] == 0.0
    for answer, gold in (("1e12", "1000000000000"), ("18.000", "18"), ("-0", "0"), ("2.50", "2.5"), ("+7", "7")):
        assert math_equal(answer, gold).reason == "numeric", (answer, gold)
    assert math_equal("1e999999999", "1").reason.startswith("numeric: not")  # no 10**999999999 is built
    # LaTeX's thin space groups thousands (it was refused: math-verify reads no value in it); between other digits not
    assert math_equal(r"1\,000", "1000").equal and math_equal("1234567", r"1\,234\,567").equal
    assert not math_equal(r"1\,5", "15").equal and not math_equal(r"1\,5000", "15000").equal


def test_a_decimal_is_paid_for_an_exact_value_it_names_not_one_it_rounds_to():
    """math-verify compares a decimal with an exact value at 6 places by default: 0.5000001 was paid for 1/2,
    1.414214 for sqrt(2), 0.3333333 for 1/3 (an attacker's pass). Now a decimal must name the value to 12 significant
    digits."""
    for answer, gold in (("0.5000001", r"\frac{1}{2}"), ("0.3333333", r"\frac{1}{3}"), ("1.414214", r"\sqrt{2}"),
                         ("3.1415927", r"\pi"), ("0.666667", "2/3"), ("0.50000000001", r"\frac{1}{2}"),
                         ("3.1415926536", r"\pi"), ("0.3333333333", r"\frac13"),
                         # math-verify's places are absolute: at 10, every value under 5e-11 was every other
                         ("0.0", r"1.6 \times 10^{-19}"), (r"2 \times 10^{-19}", r"1.6 \times 10^{-19}"),
                         (r"9.1 \times 10^{-31}", r"1.67 \times 10^{-27}"),
                         # a third: a decimal inside an equation, a tuple, a set, an interval, a matrix, a product
                         ("x = 0.3333333333", r"\frac{1}{3}"), ("(0.3333333333, 1)", r"(\frac{1}{3}, 1)"),
                         (r"\{0.3333333333, 0.6666666667\}", r"\{\frac13, \frac23\}"), ("[0, 0.3333333333]", r"[0, \frac{1}{3}]"),
                         (r"\begin{pmatrix}0.3333333333\end{pmatrix}", r"\begin{pmatrix}\frac{1}{3}\end{pmatrix}"),
                         (r"0.3333333333x", r"\frac{x}{3}")):
        assert not math_equal(answer, gold).equal, (answer, gold)
    for answer, gold in (("0.5", r"\frac{1}{2}"), ("0.25", r"\frac{1}{4}"), (r"\frac{1}{4}", "0.25"),
                         ("123456.5", r"\frac{246913}{2}"), ("0.1", r"\frac{1}{10}"), ("0.333333333333333", r"\frac13"),
                         (r"1.60 \times 10^{-19}", r"1.6 \times 10^{-19}"), (r"50\%", "0.5"), (r"50\%", "50"),
                         (r"[0.5, 1]", r"[\frac12, 1]"), (r"\sqrt{2}", "1.41421356237310"),
                         (r"1.0 \times 10^{400}", r"10^{400}"),  # (past a float's range)
                         ("x = 0.5", r"\frac12"), ("(0.5, 1)", r"(\frac12, 1)"), (r"\{0.5, 0.25\}", r"\{\frac14, \frac12\}"),
                         (r"16 \times 10^{-20}", r"1.6 \times 10^{-19}"), (r"12.5\%", r"\frac18"), (r"0.5x", r"\frac{x}{2}")):
        assert math_equal(answer, gold).equal, (answer, gold)


def test_a_ground_truth_with_several_equations_is_not_cut_to_its_last_value():
    """The normaliser keeps what follows the last "=" of the ground truth too: "2" was paid for "a=1, b=2"."""
    assert not math_equal("2", "a=1, b=2").equal
    assert math_equal("5", "x = 5").equal and math_equal("x = 5", "x=5").equal


def test_units_degrees_and_words_around_one_value_still_count():
    for answer in (r"18\text{ dollars}", r"18 \text{ cm}", r"18\mbox{ feet}", r"\text{18 ways}", r"18^{\circ}",
                   r"18^\circ", "18 students", r"18 \text{ square units}", r"\$18.00", r"18 \text{ cm}^2"):
        assert math_equal(answer, "18").equal, answer
        assert not math_equal(answer, "19").equal, answer


def test_math_verify_is_bounded_in_time():
    """A pathological expression must not hang the caller: it gets False and the reason."""
    from skyrl_gym.rewards.math import _helper

    math_equal("1", "2/2")  # warm the helper process so the timing below is the check alone
    helpers = _helper.pids()
    adversarial = "9" * 40 + "^" + "9" * 40 + "^" + "9" * 40
    start = time.monotonic()
    verdict = math_equal(adversarial, "1", timeout=1.0)
    elapsed = time.monotonic() - start
    assert verdict.equal is False and verdict.reason == "timeout"
    assert elapsed < 30  # generous bound: the point is that it returns at all
    assert math_equal(r"\frac{2}{4}", "0.5").equal  # the check was stopped in its helper, which goes on serving
    assert _helper.pids() == helpers
    assert math_equal("x" * 5000, "1").reason == "too long"


def test_a_script_without_a_main_guard_gets_its_math_reward(tmp_path):
    """The helper was a multiprocessing spawn, which imports the caller's main script again: a script without
    ``if __name__ == "__main__":`` ran again in it, the helper died, and a right answer scored 0.0."""
    import subprocess
    import sys

    script = tmp_path / "score.py"
    script.write_text(
        "import skyrl_gym\n"
        "print('top level ran')\n"
        "env = skyrl_gym.make('math', extras={'reward_spec': {'ground_truth': '\\\\frac{1}{2}'}})\n"
        "env.init([{'role': 'user', 'content': 'half?'}])\n"
        "out = env.step('so \\\\boxed{0.5}')\n"
        "print(out['reward'], out['metadata']['reason'])\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["top level ran", "1.0 math-verify"], done.stdout + done.stderr[-2000:]


def test_a_hard_expression_does_not_hold_up_other_callers():
    """serve-env runs many clients' envs in one process: a client whose answers time out math-verify must not
    make everyone else's math reward wait behind it (one helper for the process did: an honest check took 20 s
    beside two such callers instead of 0). The honest check returns while the hard one is still running."""
    from skyrl_gym.rewards import math as math_reward

    math_equal("1", "2/2")  # a helper started and warm
    pool = math_reward._helper
    free_before = len(pool._free)  # more than one where earlier tests in this process checked at once
    hard_done = threading.Event()

    def hard_caller():
        math_equal(r"9^{9^{9^{9^9}}}", "1", timeout=120)
        hard_done.set()

    caller = threading.Thread(target=hard_caller)
    caller.start()
    try:
        deadline = time.monotonic() + 30  # only stops a broken test from hanging: nothing is timed
        while len(pool._free) == free_before and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(pool._free) == free_before - 1, "the hard check never took a warm helper"
        assert math_equal(r"\frac{144}{2}", "72").equal
        assert not hard_done.is_set()  # answered beside the hard check, not after it
    finally:
        pool.close()  # ends the hard check (its helper is killed); helpers start again on the next call
        caller.join(timeout=60)
    assert math_equal(r"\frac{2}{4}", "0.5").equal
