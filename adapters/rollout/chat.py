"""Chat-template token bookkeeping: prompt ids, observation ids, end-of-turn tokens.

The rollout loop never re-tokenizes what the model produced. It only needs the ids of what comes *between*
model turns: the end of the assistant turn as the template writes it, the observation messages, and the next
generation prompt. :meth:`ChatTokenizer.observation_ids` gets them as a difference of two templatings of the
real conversation (with and without the new messages) and checks that the longer one extends the shorter one
token for token. Templates that rewrite earlier turns (e.g. drop old ``<think>`` blocks) fail that check; the
loop then falls back to templating the new messages after a fixed two-message base conversation, and records
that it did so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

Conversation = List[Dict[str, Any]]

# A neutral conversation to template new messages after, when the real one cannot be used (see module doc).
_BASE_CONVERSATION: Conversation = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "I am a user."},
]
_MARKER = "\u2063SKYRLGYMMARK\u2063"


class TemplateError(ValueError):
    """The chat template cannot be used for token-faithful bookkeeping (explains why)."""


@dataclass
class ObservationIds:
    """Ids to append after an assistant turn; ``method`` is ``"delta"`` or ``"fixed_base"``;
    ``note`` explains a fallback (empty when the delta method worked)."""

    ids: List[int]
    method: str
    note: str = ""


def _as_ids(result: Any) -> List[int]:
    """``apply_chat_template(tokenize=True)`` returns a list, or a BatchEncoding/dict in newer transformers."""
    if isinstance(result, dict) or hasattr(result, "keys"):
        result = result["input_ids"]
    if hasattr(result, "tolist"):
        result = result.tolist()
    if result and isinstance(result[0], list):
        result = result[0]
    return [int(t) for t in result]


class ChatTokenizer:
    """A tokenizer plus its chat template, with the operations the rollout loop needs.

    Args:
        tokenizer: a transformers tokenizer with a chat template.
        chat_template: overrides the tokenizer's template (a Jinja string).
        chat_template_kwargs: extra variables for the template (e.g. ``enable_thinking``).
    """

    def __init__(
        self, tokenizer: Any, chat_template: Optional[str] = None, chat_template_kwargs: Optional[Dict[str, Any]] = None
    ) -> None:
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        if chat_template is None and not getattr(tokenizer, "chat_template", None):
            raise TemplateError(f"tokenizer {getattr(tokenizer, 'name_or_path', tokenizer)!r} has no chat template")
        self.eos_token_id: Optional[int] = tokenizer.eos_token_id
        self.turn_end_token_id = self._find_turn_end_token()
        self.generation_prompt_ids = self._find_generation_prompt()

    # ------------------------------------------------------------------ templating
    def template_ids(self, messages: Sequence[Dict[str, Any]], add_generation_prompt: bool) -> List[int]:
        return _as_ids(
            self.tokenizer.apply_chat_template(
                list(messages),
                add_generation_prompt=add_generation_prompt,
                tokenize=True,
                return_dict=False,
                chat_template=self.chat_template,
                **self.chat_template_kwargs,
            )
        )

    def template_text(self, messages: Sequence[Dict[str, Any]], add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            list(messages),
            add_generation_prompt=add_generation_prompt,
            tokenize=False,
            chat_template=self.chat_template,
            **self.chat_template_kwargs,
        )

    def prompt_ids(self, messages: Sequence[Dict[str, Any]]) -> List[int]:
        """The ids the model sees before its first turn (with the generation prompt)."""
        if not messages:
            raise TemplateError("the prompt is an empty conversation")
        return self.template_ids(messages, add_generation_prompt=True)

    def encode(self, text: str) -> List[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def assistant_text(self, output_ids: Sequence[int]) -> str:
        """The assistant message content for generated ids: decoded, without the end-of-turn token."""
        ids = list(output_ids)
        while ids and ids[-1] in (self.turn_end_token_id, self.eos_token_id):
            ids.pop()
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    # ------------------------------------------------------------------ observations
    def observation_ids(
        self, conversation: Conversation, new_messages: Conversation, add_generation_prompt: bool
    ) -> ObservationIds:
        """Ids that follow the last assistant turn of ``conversation`` when ``new_messages`` are appended.

        ``conversation`` ends with the assistant message just generated (whose ids, ending in the end-of-turn
        token, are already recorded). The result covers what the template writes after that token (e.g. the
        newline after ``<|im_end|>``), the new messages, and the generation prompt if asked.
        """
        before = self.template_ids(conversation, add_generation_prompt=False)
        after = self.template_ids(list(conversation) + list(new_messages), add_generation_prompt=add_generation_prompt)
        cut = self._after_last_turn_end(before)
        if cut is not None and after[: len(before)] == before:
            return ObservationIds(before[cut:] + after[len(before) :], "delta")
        if cut is None:
            note = "the templated conversation has no end-of-turn token after the assistant message"
        else:
            mismatch = next((i for i, (a, b) in enumerate(zip(before, after)) if a != b), min(len(before), len(after)))
            note = (
                f"appending messages changed earlier tokens of the template (first change at token {mismatch}: "
                f"{self.decode(before[mismatch:mismatch + 8], False)!r} -> {self.decode(after[mismatch:mismatch + 8], False)!r}); "
                "the template rewrites earlier turns, so re-templating will not reproduce the rollout"
            )
        return ObservationIds(self._fixed_base_ids(new_messages, add_generation_prompt), "fixed_base", note)

    def _fixed_base_ids(self, new_messages: Conversation, add_generation_prompt: bool) -> List[int]:
        base = self.template_ids(_BASE_CONVERSATION, add_generation_prompt=False)
        cut = self._after_last_turn_end(base)
        if cut is None:
            raise TemplateError("the chat template writes no end-of-turn token after a user message")
        if not new_messages:
            # No messages: only the end of the assistant turn and, if asked, the generation prompt. Template an
            # assistant message to learn what follows its end-of-turn token.
            probe = list(_BASE_CONVERSATION) + [{"role": "assistant", "content": "x"}]
            probe_ids = self.template_ids(probe, add_generation_prompt=False)
            tail_start = self._after_last_turn_end(probe_ids)
            tail = probe_ids[tail_start:] if tail_start is not None else []
            return tail + (list(self.generation_prompt_ids) if add_generation_prompt else [])
        full = self.template_ids(list(_BASE_CONVERSATION) + list(new_messages), add_generation_prompt=add_generation_prompt)
        if full[:cut] != base[:cut]:
            raise TemplateError("the chat template changes the base conversation when messages are appended")
        return full[cut:]

    # ------------------------------------------------------------------ template facts
    def _after_last_turn_end(self, ids: List[int]) -> Optional[int]:
        for i in range(len(ids) - 1, -1, -1):
            if ids[i] == self.turn_end_token_id:
                return i + 1
        return None

    def _find_turn_end_token(self) -> int:
        """The token the template puts right after an assistant message's content (``<|im_end|>``, ``<|eot_id|>``).

        Found by templating a marker message, so it works for templates whose end-of-turn token is not the
        tokenizer's EOS. Falls back to EOS.
        """
        try:
            text = self.template_text(
                [{"role": "user", "content": "hi"}, {"role": "assistant", "content": _MARKER}], add_generation_prompt=False
            )
        except Exception:
            text = ""
        if _MARKER in text:
            tail = text.split(_MARKER, 1)[1]
            tail_ids = self.encode(tail)
            special = set(getattr(self.tokenizer, "all_special_ids", []) or [])
            if tail_ids and (tail_ids[0] in special or tail_ids[0] == self.eos_token_id):
                return int(tail_ids[0])
        if self.eos_token_id is None:
            raise TemplateError("cannot find the end-of-turn token: the template writes none and there is no EOS")
        return int(self.eos_token_id)

    def _find_generation_prompt(self) -> List[int]:
        messages = [{"role": "user", "content": "hi"}]
        without = self.template_ids(messages, add_generation_prompt=False)
        with_prompt = self.template_ids(messages, add_generation_prompt=True)
        if with_prompt[: len(without)] != without:
            raise TemplateError("adding the generation prompt changes earlier tokens of the template")
        return with_prompt[len(without) :]


__all__ = ["ChatTokenizer", "ObservationIds", "TemplateError"]
