"""The games/* envs: golden trajectories (known-good moves with their rewards, known-bad moves answered with an
observation), seeded rows from the dataset builders, and the checker on every game."""

from __future__ import annotations

import json
import re

import pytest

import skyrl_gym
from skygym_contrib.games.catalog import GAMES
from skygym_contrib.games.game_2048 import slide, slide_row_left
from skyrl_gym import datasets
from skyrl_gym.checker import check_env
from skyrl_gym.errors import DataError


def game(env_id, **params):
    env = skyrl_gym.make(env_id, extras={"reward_spec": {"ground_truth": params}})
    env.init([{"role": "user", "content": "(the rules)"}])
    return env


def play(env, *moves):
    """Play ``moves`` in order; return (reward, done, observation text, reason) per move."""
    out = []
    for move in moves:
        step = env.step(f"Thinking... <move>{move}</move>" if move is not None else "no tag here")
        text = step["observations"][0]["content"] if step["observations"] else step["metadata"].get("final", "")
        out.append((step["reward"], step["done"], text, step["metadata"].get("reason")))
    return out


def test_wordle_golden_trajectory():
    env = game("games/wordle", secret="crane")
    (r1, d1, t1, _), (r2, d2, t2, why2), (r3, d3, _, _) = play(env, "apple", "cat", "crane")
    assert (r1, d1) == (0.02, False) and "APPLE: Y___G" in t1  # a elsewhere, e in place
    assert (r2, d2) == (0.0, False) and "not a five-letter word" in t2 and "invalid move" in why2
    assert (r3, d3) == (pytest.approx(0.98), True)  # the word takes the episode's return to 1.0


@pytest.mark.parametrize("game_id, secret, near, win", [
    ("games/wordle", {"secret": "light"}, "lighb", "light"),
    ("games/mastermind", {"code": [4, 3, 1, 5], "colours": 6}, "4311", "4315"),
])
def test_a_near_miss_repeated_earns_nothing_more_and_no_path_to_the_win_beats_finding_it_at_once(
        game_id, secret, near, win):
    """Each green letter or black peg was paid again on every guess: five near misses, then the word, earned 1.4
    where the word at once earned 1.0 (an attacker's pass), so stalling paid. Only a new best earns; a win brings the
    episode's return to 1.0 whatever came before it."""
    at_once = play(game(game_id, **secret), win)
    stalled = play(game(game_id, **secret), *[near] * 5, win)
    better = play(game(game_id, **secret), near[:2] + near[:2] + near[4:] if game_id == "games/mastermind"
                  else "lipid", near, win)
    assert [s[0] for s in at_once] == [1.0]
    assert stalled[0][0] == pytest.approx(0.02 * (4 if game_id == "games/wordle" else 3))
    assert [s[0] for s in stalled[1:5]] == [0.0] * 4 and "no more" in stalled[1][3]
    for episode in (stalled, better):
        assert sum(s[0] for s in episode) == pytest.approx(1.0) and episode[-1][1] is True


def test_a_rows_max_turns_ends_the_game_early():
    env = skyrl_gym.make("games/guess_number", extras={"reward_spec": {"ground_truth": {"secret": 37, "high": 100}},
                                                       "max_turns": 2})
    steps = play(env, "50", "25")
    assert steps[-1][:2] == (0.0, True) and steps[-1][3] == "out of moves after 2 turns (25 is too low)"


def test_wordle_out_of_guesses_names_the_word():
    env = game("games/wordle", secret="crane")
    steps = play(env, "ghost", "ghost", "ghost", "ghost", "ghost", "ghost")
    assert [s[0] for s in steps] == [0.0] * 6 and steps[-1][1] is True and "'crane'" in steps[-1][3]


def test_tictactoe_against_minimax_golden_draw_and_loss():
    draw = play(game("games/tictactoe", opponent_first=False, seed=0), "1", "2", "7", "6", "9")
    assert [s[0] for s in draw] == [0.0, 0.0, 0.0, 0.0, 0.5] and draw[-1][1] is True
    assert "O takes cell 5" in draw[0][2] and "X 2 3\n4 O 6" in draw[0][2]
    loss = play(game("games/tictactoe", opponent_first=False, seed=0), "1", "9", "3", "4")
    assert loss[-1][:2] == (0.0, True) and loss[-1][3] == "lost: O took cell 8 and won"


def test_tictactoe_bad_moves_are_observations_and_three_in_a_row_end_the_game():
    env = game("games/tictactoe", opponent_first=False, seed=0)
    steps = play(env, "1", "1", "10", None)
    assert "cell 1 is taken by X" in steps[1][2] and "not a cell" in steps[2][2] and "No move found" in steps[3][3]
    assert steps[1][1] is steps[2][1] is False and steps[3][1] is True
    assert "3 invalid moves in a row" in steps[3][3]


def test_tictactoe_random_opponent_is_seeded():
    first = play(game("games/tictactoe_random", opponent_first=False, seed=7), "5", "1", "9")
    again = play(game("games/tictactoe_random", opponent_first=False, seed=7), "5", "1", "9")
    assert first == again and first[-1][:2] == (1.0, True)


def test_nim_golden_win_and_bad_moves():
    env = game("games/nim", heaps=[1, 2])
    steps = play(env, "3 1", "2 5", "2 1", "2 1")
    assert "there is no heap 3" in steps[0][2] and "heap 2 has 2" in steps[1][2]
    assert "Opponent takes 1 from heap 1" in steps[2][2] and steps[2][:2] == (0.0, False)
    assert steps[3][:2] == (1.0, True)


def test_guess_number_golden_binary_search():
    steps = play(game("games/guess_number", secret=37, high=100), "50", "25", "101", "37")
    assert [s[0] for s in steps] == [0.0, 0.0, 0.0, 1.0]
    assert "lower" in steps[0][2] and "between 26 and 49" in steps[1][2] and "outside 1-100" in steps[2][2]


def test_look_alike_digits_are_an_invalid_move():
    """Found by `skyrl-gym audit`: int() reads fullwidth digits, so "３７" won guess-the-number and mastermind."""
    steps = play(game("games/guess_number", secret=37, high=100), "３７", "٣٧", "37")
    assert [s[0] for s in steps] == [0.0, 0.0, 1.0]
    assert steps[0][3].startswith("invalid move") and "digits 0-9" in steps[0][2]
    steps = play(game("games/mastermind", code=[1, 2, 3, 4], colours=6), "１２３４", "1234")
    assert [s[0] for s in steps] == [0.0, 1.0] and "digits 0-9" in steps[0][2]


def test_blackjack_golden_hands():
    win = play(game("games/blackjack", seed=6), "stand")  # 20 against a dealer 6 6 who draws to 19
    assert win == [(1.0, True, "You 20, dealer 6 6 4 3 = 19. You win.", None)]
    push = play(game("games/blackjack", seed=2), "hit", "stand")  # 4 6 + J = 20 against Q J
    assert push[0][:2] == (0.0, False) and push[1][:2] == (0.5, True)
    bust = play(game("games/blackjack", seed=3), "double", "hit")  # 3 Q + J
    assert "not a blackjack move" in bust[0][2] and bust[1][:2] == (0.0, True) and bust[1][3] == "bust with 23"


def test_hangman_golden_trajectory():
    steps = play(game("games/hangman", secret="apple"), "p", "z", "p", "a", "l", "e")
    assert [s[0] for s in steps] == [0.1, 0.0, 0.0, 0.05, 0.05, 1.0]
    assert "'z' is not in the word" == steps[1][3] and "was tried already" in steps[2][2]
    assert "Word: a p p l _" in steps[4][2]


def test_mastermind_golden_trajectory():
    steps = play(game("games/mastermind", code=[1, 2, 3, 4], colours=6), "1243", "1237", "5566", "1234")
    assert [s[0] for s in steps] == pytest.approx([0.04, 0.0, 0.0, 0.96])  # the code: 1.0 in all
    assert "2 black, 2 white" in steps[0][2] and "not 4 digits 1-6" in steps[1][2]
    assert steps[2][3] == "5566 has no digit in the right place"


def test_lights_out_golden_solution_and_bad_press():
    steps = play(game("games/lights_out", grid=["010", "111", "010"]), "4 4", "1 1", "1 1", "2 2")
    assert "off the 3x3 grid" in steps[0][2] and steps[1][3] == "4 light(s) still on"
    assert steps[3][:2] == (1.0, True)


def test_twenty_questions_golden_trajectory():
    steps = play(game("games/twenty_questions", secret="eagle"), "ask: can it fly?", "ask: is it blue?",
                 "ask: is it an animal?", "guess: dog", "guess: eagle")
    assert "Answer: yes" in steps[0][2] and "ask about exactly one of" in steps[1][2]
    assert steps[3][3] == "wrong guess 'dog'" and steps[4][:2] == (0.86, True)  # 1.0 - 0.02 x 2 questions - 0.1


def test_twenty_questions_does_not_pay_for_naming_every_thing_in_turn():
    """Wrong guesses cost nothing: guessing the 16 things in order scored 1.0 for every secret, more than asking."""
    from skygym_contrib.games.twenty_questions import THINGS

    scores = []
    for secret in sorted(THINGS):
        steps = play(game("games/twenty_questions", secret=secret), *(f"guess: {thing}" for thing in sorted(THINGS)))
        scores.append(next(reward for reward, done, *_ in steps if done))
    asked = play(game("games/twenty_questions", secret="eagle"), "ask: is it an animal?", "ask: can it fly?",
                 "ask: is it big?", "ask: is it blue?", "guess: eagle")
    assert sum(scores) / len(scores) < 0.4 < asked[-1][0]


ROOM = ["######", "#....#", "#....#", "#....#", "#....#", "######"]


def test_sokoban_golden_push_onto_the_goal_and_bad_moves():
    env = game("games/sokoban", rows=ROOM, goal=[1, 4], box=[3, 3], player=[4, 3])
    steps = play(env, "down", "left", "up", "right", "down", "right", "r", "up", "up")
    assert "a wall blocks down" in steps[0][2] and steps[0][3].startswith("invalid move")
    assert "Room:\n######\n#   .#\n#    #\n#  @$#\n#    #" in steps[3][2]  # pushed the box right
    assert "a wall blocks right" in steps[6][2] and steps[6][1] is False  # "r" is right; the wall holds
    assert [s[0] for s in steps] == [0.0] * 8 + [1.0] and steps[-1][1] is True


def test_sokoban_box_in_a_corner_ends_the_game():
    env = game("games/sokoban", rows=ROOM, goal=[4, 1], box=[2, 4], player=[3, 4])
    assert play(env, "up") == [(0.0, True, "The box is stuck in a corner.", "lost: the box is stuck in a corner")]


def test_2048_slides_merge_once_and_reward_the_merged_value():
    assert slide_row_left([2, 2, 4, 0]) == ([4, 4, 0, 0], 4)
    assert slide_row_left([2, 2, 2, 2]) == ([4, 4, 0, 0], 8)
    assert slide([[0, 0, 0, 2], [0, 0, 0, 2], [0, 0, 0, 0], [0, 0, 0, 0]], "up")[0][0] == [0, 0, 0, 4]
    env = game("games/2048", seed=1, target=8)
    env.board = [[2, 4, 0, 0], [4, 2, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    stuck = play(env, "left")
    assert "moves no tile" in stuck[0][2] and stuck[0][0] == 0.0  # nothing can slide left
    env.board = [[2, 2, 0, 0], [4, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    merged = play(env, "right")
    assert merged[0][0] == 0.004 and "Slid right" in merged[0][2]
    assert play(env, "down", "right", "left", "up")  # the game goes on with seeded tiles, never raising


def test_bad_rows_name_the_builder():
    with pytest.raises(DataError, match="build_rows"):
        skyrl_gym.make("games/wordle", extras={"reward_spec": {"ground_truth": "crane"}})
    with pytest.raises(DataError, match="bad game parameters"):
        skyrl_gym.make("games/nim", extras={"reward_spec": {"ground_truth": {"heap": [1]}}})


def test_builder_rows_are_seeded_and_their_prompt_is_the_first_state():
    rows = datasets.build_rows("games/nim", split="train", size=4, seed=3, heaps=4)
    assert rows == datasets.build_rows("games/nim", split="train", size=4, seed=3, heaps=4)
    assert all(len(row["reward_spec"]["ground_truth"]["heaps"]) == 4 for row in rows)
    assert "Heaps: 1:" in rows[0]["prompt"][0]["content"]
    with pytest.raises(TypeError, match="heaps and max_size"):
        datasets.build_rows("games/nim", size=1, heap=4)
    env = skyrl_gym.make("games/nim", env_config={"seed": 9})  # no row: the game comes from env_config
    prompt, _ = env.init([{"role": "user", "content": "Hello."}])
    assert "Let's play Nim" in prompt[0]["content"]


@pytest.mark.parametrize("env_id", sorted(GAMES))
def test_check_passes_on_rows_from_the_builder(env_id):
    rows = datasets.build_rows(env_id, split="test", size=2, seed=0)
    report = check_env(env_id, rows, huge_action_chars=200_000)
    assert report.ok and not report.warnings, str(report)  # a reference move, where a game has one, wins
    if env_id in ("games/wordle", "games/guess_number", "games/twenty_questions", "games/mastermind"):
        assert all("reference_action" in row["extra_info"] for row in rows)


@pytest.mark.parametrize("env_id", sorted(GAMES))
def test_no_game_is_in_two_splits(env_id):
    """Every split drew from the same games: wordle's and guess_number's test rows were all train rows."""
    from skyrl_gym.registration import load_env_creator

    split_key = load_env_creator(GAMES[env_id], env_id=env_id).split_key
    rows = {split: datasets.build_rows(env_id, split=split, size=100 if split == "train" else 30, seed=0)
            for split in datasets.GENERATED_SPLITS}
    for same in (lambda row: json.dumps(split_key(row["reward_spec"]["ground_truth"]), sort_keys=True),
                 datasets.task_key):
        games = {split: {same(row) for row in built} for split, built in rows.items()}
        assert not games["test"] & games["train"] and not games["validation"] & games["train"]
        assert not games["test"] & games["validation"]
    if env_id in ("games/lights_out", "games/nim", "games/sokoban"):  # the prompt shows the whole game
        prompts = {split: {json.dumps(row["prompt"]) for row in built} for split, built in rows.items()}
        assert not prompts["test"] & prompts["train"]  # lights_out's did: one grid, its presses in two orders
    assert datasets.split_overlap(env_id, test_size=30, train_size=300).shared == []


def test_a_game_space_too_small_for_three_splits_is_refused():
    with pytest.raises(ValueError, match=re.escape("games/lights_out with settings {'presses': 9}: 10000 draws gave "
                                                   "no task of the 'test' split")):
        datasets.build_rows("games/lights_out", split="test", size=1, presses=9)  # one grid: all nine pressed


def test_settings_with_too_few_games_for_a_split_are_refused_naming_them():
    assert [r["reward_spec"]["ground_truth"]["secret"]
            for r in datasets.build_rows("games/guess_number", split="test", size=3, high=3)] == [1, 1, 1]
    with pytest.raises(ValueError, match=re.escape("games/guess_number with settings {'high': 2}: a pool of 2 "
                                                   "task(s) has none for the 'train' split")):
        datasets.build_rows("games/guess_number", split="train", size=1, high=2)


@pytest.mark.parametrize("env_id, settings, message", [
    ("games/lights_out", {"presses": 0}, "presses must be from 1 to 9, got 0"),  # looped for ever: no light ever on
    ("games/sokoban", {"pulls": 0}, "pulls must be from 1 to 1000, got 0"),  # the box never left the goal
    ("games/sokoban", {"size": 10**5}, "size must be from 5 to 12"),  # a room of 10^10 cells
    ("games/mastermind", {"length": 10**9}, "length must be from 1 to 10"),
    ("games/nim", {"heaps": 2, "max_size": 1}, "no game in 1000 draws"),  # two heaps of 1: the nim-sum is always 0
    ("games/guess_number", {"high": "lots"}, "high must be an integer"),
])
def test_settings_a_client_picks_that_allow_no_game_are_refused_at_once(env_id, settings, message):
    """A serve-env client picks the games' settings: lights_out with presses=0 hung its thread for ever."""
    import random

    from skyrl_gym.registration import load_env_creator

    with pytest.raises(ValueError, match=re.escape(message)):
        load_env_creator(GAMES[env_id], env_id=env_id).generate(random.Random(0), **settings)


WINNABLE = ["games/guess_number", "games/mastermind", "games/twenty_questions", "games/wordle"]


@pytest.mark.parametrize("env_id", WINNABLE)
def test_a_games_wrong_moves_are_legal_and_do_not_win(env_id):
    """The audit plays them as known-wrong replies: a move the rules refuse would test only the refusal."""
    cls = skyrl_gym.spec(env_id).make().__class__
    for row in datasets.build_rows(env_id, split="test", size=3, seed=0):
        params = row["reward_spec"]["ground_truth"]
        moves = cls.wrong_moves(params, 3)
        assert len(moves) == 3 and len(set(moves)) == 3 and cls.winning_move(params) not in moves
        for move in moves:
            (reward, done, text, reason), = play(game(env_id, **params), move)
            assert reward < 1.0 and not (reason or "").startswith("invalid move"), (move, text, reason)


def test_guess_number_wrong_moves_stay_in_range_and_do_not_walk_a_billion_numbers():
    from skygym_contrib.games.guess_number import GuessNumberEnv

    assert GuessNumberEnv.wrong_moves({"secret": 1, "high": 10**9}, 3) == ["2", "3", "4"]
    assert GuessNumberEnv.wrong_moves({"secret": 2, "high": 2}, 3) == ["1"]


def test_the_audit_catches_a_game_that_pays_any_guess():
    """Before the games named their wrong moves, twenty_questions' known-wrong reply was its answer with each letter
    moved on ('hvftt: esbxfs') and its hedges hid the answer among numbers: all invalid moves, so a verifier that
    paid any guess passed the audit."""
    import dataclasses

    from skygym_contrib.games.audit import audit_profile
    from skygym_contrib.games.twenty_questions import TwentyQuestionsEnv
    from skyrl_gym.audit import audit_env

    class PaysAnyGuess(TwentyQuestionsEnv):
        def play(self, move):
            outcome = super().play(move)
            if move.startswith("guess:"):
                outcome.reward, outcome.done = 1.0, True
            return outcome

    profile = audit_profile("games/twenty_questions")
    rows = [dict(row, env_class="games_test/pays_any_guess")
            for row in datasets.build_rows("games/twenty_questions", split="test", size=1, seed=0)]
    skyrl_gym.register(id="games_test/pays_any_guess", entry_point=PaysAnyGuess)
    try:
        report = audit_env("games_test/pays_any_guess", rows, profile=profile)
        unaware = audit_env("games_test/pays_any_guess", rows, profile=dataclasses.replace(profile, wrong_answers_of=None))
    finally:
        skyrl_gym.deregister("games_test/pays_any_guess")
    wrong = [case for case in report.cases if case.kind == "known-wrong"]
    assert not report.ok and [case.got for case in wrong[:3]] == [1.0, 1.0, 1.0], str(report)
    assert unaware.ok, str(unaware)  # what the audit said before
    honest = audit_env("games/twenty_questions", rows=[dict(rows[0], env_class="games/twenty_questions")])
    assert honest.ok, str(honest)
