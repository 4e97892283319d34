"""How the RLM env reads a response (its repl block, FINAL_VAR, FINAL): SkyRL-gym's matches, in linear
time."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skyrl_gym.envs.rlm.env import find_code_block, find_final_answer

# SkyRL-gym's expressions: the reference the scanners must agree with.
REPL_BLOCK = re.compile(r"```repl[ \t]*\n(.*?)\n```", re.DOTALL)
FINAL_VAR = re.compile(r"^\s*FINAL_VAR\((.*?)\)", re.MULTILINE | re.DOTALL)
FINAL = re.compile(r"^\s*FINAL\((.*)\)\s*$", re.MULTILINE | re.DOTALL)

PIECES = ["```repl", "```", "FINAL(", "FINAL_VAR(", ")", "(", "\n", " ", "\t", "\r", "\x0b", "x", "a b"]
PIECES += ["repl"]


def expected_code_block(text):
    blocks = REPL_BLOCK.findall(text)
    return blocks[-1].strip() if blocks else None


def expected_final(text):
    finals = FINAL.findall(text)
    return finals[-1].strip() if finals else None


class NameEcho:
    """A REPL stand-in that answers ``FINAL_VAR(name)`` with the name it was asked for."""

    def execute(self, code):
        name = re.fullmatch(r"print\(FINAL_VAR\((.*)\)\)", code, re.DOTALL).group(1)
        return type("Result", (), {"stdout": "var:" + eval(name)})()


def expected_answer(text):
    names = FINAL_VAR.findall(text)
    if names:
        return "var:" + names[-1].strip().strip("\"'")
    return expected_final(text)


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=24).map("".join))
def test_the_scanners_find_what_the_regular_expressions_found(text):
    assert find_code_block(text) == expected_code_block(text)
    assert find_final_answer(text, NameEcho()) == expected_answer(text)


@pytest.mark.parametrize(
    "text, block, answer",
    [
        ("```repl\nx = 1\n```\nFINAL_VAR(x)", "x = 1", "var:x"),
        ("   \n\t FINAL(42) \nmore", None, "42"),
        ("FINAL(a) then\nFINAL(b)\n", None, "a) then\nFINAL(b"),  # greedy, as in SkyRL-gym
        ("say FINAL(1)", None, None),  # not at a line's start
        ("```repl\n\n```", "", None),
    ],
)
def test_examples(text, block, answer):
    assert find_code_block(text) == block
    assert find_final_answer(text, NameEcho()) == answer


@pytest.mark.timeout(20)
@pytest.mark.parametrize(
    "text",
    [
        "\n" * 1_000_000,  # ^\s* from every line start over every newline after it
        "FINAL_VAR(\n" * 100_000,  # every opening searched to the end for its ")"
        "FINAL(\n" * 100_000,
        "```repl\nx" * 100_000,  # every opening searched to the end for its closing fence
    ],
)
def test_a_megabyte_of_unclosed_openings_is_read_at_once(text):
    """100,000 newlines took each FINAL expression 10 s of one core (GIL held); a megabyte, hours."""
    assert find_code_block(text) is None
    assert find_final_answer(text, NameEcho()) is None
