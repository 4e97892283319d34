"""The drift check catches a template that rewrites earlier turns, and finds nothing on the SmolLM2 template."""

from __future__ import annotations

from typing import Any

import pytest

from skygym_adapters.rollout import ChatTokenizer, RolloutConfig, RolloutGenerator, check_drift
from tests.adapters.support import ScriptedEngine, user



# ChatML that, like Qwen3's template, drops the <think> block of assistant turns that come before the last user
# message (models trained this way never see their old reasoning). Written for these tests on SmolLM2's
# special tokens.
STRIP_OLD_THINKING_TEMPLATE = (
    "{%- set ns = namespace(last_user=-1) -%}"
    "{%- for m in messages -%}{%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}{%- endfor -%}"
    "{%- for m in messages -%}"
    "{%- set content = m.content -%}"
    "{%- if m.role == 'assistant' and loop.index0 < ns.last_user and '</think>' in content -%}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') -%}"
    "{%- endif -%}"
    "{{- '<|im_start|>' + m.role + '\\n' + content + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

THINKING_REPLIES = ["<think>let me see</think>first answer", "<think>again</think>second answer"]


async def rollout(tokenizer: Any, template: Any) -> Any:
    engine = ScriptedEngine(tokenizer, THINKING_REPLIES)
    config = RolloutConfig(max_turns=2, chat_template=template, check_drift=True,
                           sampling_params={"max_generate_length": 32})
    generator = RolloutGenerator(engine, tokenizer, config)
    (trajectory,) = await generator.run([user("question")], ["test_countdown_turns"], [{"turns": 2}])
    return generator, trajectory


async def test_drift_check_catches_a_template_that_strips_earlier_thinking(tokenizer: Any) -> None:
    generator, t = await rollout(tokenizer, STRIP_OLD_THINKING_TEMPLATE)
    # The loop noticed while rolling out: appending the observation changed earlier tokens, so it fell back to
    # templating the observation after a fixed base conversation (the recording stays what the model saw).
    assert t.turns[0].observation_method == "fixed_base"
    assert "rewrites earlier turns" in t.turns[0].observation_note
    report = t.drift
    assert not report.ok and report.kind == "template"
    assert report.turn == 0
    assert "<think>" in report.recorded and "<think>" not in report.retemplated
    assert "removes the <think> block" in report.reason
    # The position is exact: everything before it matches, the token at it does not.
    recorded = t.prompt_ids + t.response_ids()
    retemplated = generator.chat.template_ids(t.conversation, add_generation_prompt=False)
    assert recorded[: report.position] == retemplated[: report.position]
    assert recorded[report.position] != retemplated[report.position]
    # What the model saw at turn 2 still contains its first <think> block: the recording is faithful.
    second_context = tokenizer.decode(recorded[: t.turns[1].context_length])
    assert "<think>let me see</think>first answer" in second_context
    assert str(report).startswith("template drift at token")


async def test_same_replies_on_the_smollm2_template_have_no_drift(tokenizer: Any) -> None:
    _, t = await rollout(tokenizer, None)
    assert t.turns[0].observation_method == "delta"
    assert t.drift.ok and t.drift.kind == "none"
    assert check_drift(t, ChatTokenizer(tokenizer)).ok


async def test_drift_check_reports_non_canonical_tokenization(tokenizer: Any) -> None:
    # "hello" spelled as single characters: the same text, but not the tokens the tokenizer would produce.
    odd_ids = [tokenizer.convert_tokens_to_ids(c) for c in "hello"]
    generator = RolloutGenerator(ScriptedEngine(tokenizer, ["x"]), tokenizer, RolloutConfig())
    _, t = await rollout(tokenizer, None)
    first = t.turns[0]
    t.ids[first.start : first.output_end - 1] = odd_ids  # pretend the model produced this spelling
    shift = len(odd_ids) - (first.output_end - 1 - first.start)
    for turn in t.turns:
        if turn is not first:
            turn.start, turn.output_end, turn.end = turn.start + shift, turn.output_end + shift, turn.end + shift
    first.output_end += shift
    first.end += shift
    t.conversation[1] = {"role": "assistant", "content": "hello"}
    report = check_drift(t, generator.chat)
    assert not report.ok and report.kind == "tokenization" and report.turn == 0
    assert "canonical" in report.reason


@pytest.mark.trl
async def test_drift_check_catches_the_real_qwen3_template_shipped_with_trl(tokenizer: Any) -> None:
    """The same check with Qwen3's own chat template (TRL ships a copy); runs where trl is installed."""
    trl = pytest.importorskip("trl", reason="TRL ships the Qwen3 template used here")
    from pathlib import Path

    template_path = Path(trl.__file__).parent / "chat_templates" / "qwen3.jinja"
    if not template_path.is_file():
        pytest.skip(f"this TRL version has no {template_path.name}")
    generator, t = await rollout(tokenizer, template_path.read_text())
    assert t.turns[0].observation_method == "fixed_base"
    assert not t.drift.ok and t.drift.kind == "template" and t.drift.turn == 0
    assert "<think>" in t.drift.recorded and "removes the <think> block" in t.drift.reason
