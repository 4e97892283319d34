"""Drift check: does re-templating a trajectory's final conversation reproduce the ids that were recorded?

Trainers that rebuild training sequences from chat text (instead of keeping the generated ids) train on tokens
the model never produced when the two differ. This module finds out, per trajectory, whether they would differ,
where, and why: a template that rewrites earlier turns (e.g. drops old ``<think>`` blocks), text that
re-tokenizes differently from what the model generated, or a template that renders the prompt differently.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional, Sequence

from skygym_adapters.rollout.chat import ChatTokenizer
from skygym_adapters.rollout.trajectory import Trajectory

_CONTEXT_TOKENS = 8


@dataclass
class DriftReport:
    """The result of :func:`check_drift`. ``ok`` is True when the re-templated ids reproduce the recording.

    On drift: ``position`` is the first differing index into ``prompt_ids + response_ids``, ``recorded`` and
    ``retemplated`` the text of a few tokens from there, ``turn`` the assistant turn it falls in (None: prompt or
    an observation), and ``reason`` a sentence on the likely cause.
    """

    ok: bool
    # "none"; "tokenization": the template reproduces the text but re-tokenizing it gives other ids than the
    # model generated; "template": the re-templated text itself differs (the template rewrote something).
    kind: str = "none"
    position: Optional[int] = None
    turn: Optional[int] = None
    recorded: str = ""
    retemplated: str = ""
    reason: str = ""

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        if self.ok:
            return "no drift"
        where = f"turn {self.turn}" if self.turn is not None else "outside model output"
        return (
            f"{self.kind} drift at token {self.position} ({where}): recorded {self.recorded!r} vs re-templated "
            f"{self.retemplated!r}: {self.reason}"
        )


def check_drift(trajectory: Trajectory, chat: ChatTokenizer) -> DriftReport:
    """Re-template ``trajectory.conversation`` and compare with ``prompt_ids + response_ids``.

    The recorded ids must be a prefix of the re-templated ids: the template may add tokens after the last
    assistant turn (a trailing newline) that the model never generated, nothing else. Trajectories that ended in
    an env error before the first turn have nothing to check and pass.
    """
    recorded = list(trajectory.prompt_ids) + trajectory.response_ids()
    if not trajectory.turns:
        return DriftReport(ok=True)
    messages = _conversation_up_to_last_assistant(trajectory.conversation)
    retemplated = chat.template_ids(messages, add_generation_prompt=False)
    limit = min(len(recorded), len(retemplated))
    position = next((i for i in range(limit) if recorded[i] != retemplated[i]), None)
    if position is None:
        if len(recorded) <= len(retemplated):
            return DriftReport(ok=True)
        position = limit
    prompt_length = len(trajectory.prompt_ids)
    turn = _turn_at(trajectory, position - prompt_length)
    recorded_text = chat.decode(recorded, skip_special_tokens=False)
    retemplated_text = chat.template_text(messages, add_generation_prompt=False)
    kind = "tokenization" if retemplated_text.startswith(recorded_text) else "template"
    report = DriftReport(
        ok=False,
        kind=kind,
        position=position,
        turn=turn,
        recorded=chat.decode(recorded[position : position + _CONTEXT_TOKENS], skip_special_tokens=False),
        retemplated=chat.decode(retemplated[position : position + _CONTEXT_TOKENS], skip_special_tokens=False),
    )
    if kind == "tokenization":
        report.reason = (
            "same text, different tokens: the model's token sequence is not the tokenizer's canonical "
            "tokenization of its own text, so re-tokenizing the conversation changes it"
        )
    else:
        char = next((i for i, (a, b) in enumerate(zip(recorded_text, retemplated_text)) if a != b),
                    min(len(recorded_text), len(retemplated_text)))
        report.reason = _explain(trajectory, chat, recorded, retemplated, position, turn) + (
            f" (text differs at character {char}: recorded {recorded_text[char:char + 40]!r} vs re-templated "
            f"{retemplated_text[char:char + 40]!r})"
        )
    return report


def _conversation_up_to_last_assistant(conversation: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    last = max((i for i, m in enumerate(conversation) if m.get("role") == "assistant"), default=len(conversation) - 1)
    return list(conversation[: last + 1])


def _turn_at(trajectory: Trajectory, response_index: int) -> Optional[int]:
    if response_index < 0:
        return None
    for i, turn in enumerate(trajectory.turns):
        if turn.start <= response_index < turn.output_end:
            return i
    return None


def _explain(
    trajectory: Trajectory,
    chat: ChatTokenizer,
    recorded: List[int],
    retemplated: List[int],
    position: int,
    turn: Optional[int],
) -> str:
    prompt_length = len(trajectory.prompt_ids)
    if position < prompt_length:
        return "the template renders the prompt differently without the generation prompt (a template quirk)"
    if position >= len(retemplated):
        return "the recording is longer than the re-templated conversation (tokens recorded that no message holds)"
    if turn is None:
        notes = [t.observation_note for t in trajectory.turns if t.observation_note]
        if notes:
            return "an observation was tokenized after a fallback: " + notes[0]
        return "observation or template tokens differ from what the template writes for the final conversation"
    # Inside an assistant turn: did the template drop or rewrite this turn, or is it a re-tokenization?
    this_turn = trajectory.turns[turn]
    generated_text = chat.decode(trajectory.ids[this_turn.start : this_turn.output_end], skip_special_tokens=False)
    # The re-templated rendering of this turn: up to its end-of-turn token.
    rest = retemplated[position:]
    turn_end = rest.index(chat.turn_end_token_id) if chat.turn_end_token_id in rest else len(rest)
    retemplated_text = chat.decode(rest[:turn_end], skip_special_tokens=False)
    if "<think>" in generated_text and "<think>" not in retemplated_text:
        return (
            f"turn {turn}: the template removes the <think> block of an earlier assistant turn when later messages "
            "follow; re-templated text is not what the model saw or produced"
        )
    return f"turn {turn}: the template rewrites this assistant turn's text when it re-renders the conversation"


__all__ = ["DriftReport", "check_drift"]
