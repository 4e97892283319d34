"""An agent on the token backend (``infer_backend: skyrl-train``), offline on CPU: the embedded SmolLM2-135M on the HF
engine plays the multiply tool agent (a ReAct agent with Python in the sandbox) on rows made here.

    python examples/agents/token_backend.py            # training output: the bundled trainer's GeneratorOutput
    python examples/agents/token_backend.py --eval     # evaluation: rewards, messages, per-trajectory results

A trainer passes its own engines and tokenizer the same way (``AgentRunner(cfg, infer_engine, tokenizer)``); the
bundled trainer does it for you with ``generator.task=examples/agents/multiply_tool_agent.yaml``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from skygym_adapters.agents import AgentRunner, load_agent_config
from skygym_adapters.engines.hf import HFEngine
from skygym_adapters.models import load_tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_rows import tool_rows  # noqa: E402  (this folder's row builder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--eval", action="store_true", help="evaluate (val_mode=True) instead of a training batch")
    parser.add_argument("--rows", type=int, default=2, help="questions (default 2)")
    args = parser.parse_args()

    cfg = load_agent_config(str(Path(__file__).with_name("multiply_tool_agent.yaml")))
    cfg.generator.infer_backend = "skyrl-train"  # tokens in and out through the engine below, not a server
    cfg.generator.backend_config.clear()  # a server's address means nothing to a token backend
    engine = HFEngine("smollm2-135m")  # the embedded model, offline
    tokenizer = load_tokenizer("smollm2-135m")
    rows = tool_rows("validation", args.rows)  # a batch is a list of rows (or the trainer's GeneratorInput)

    async def run() -> dict:
        async with AgentRunner(cfg, infer_engine=engine, tokenizer=tokenizer) as runner:
            return await runner.run(rows, val_mode=args.eval)

    out = asyncio.run(run())
    if args.eval:
        print("rewards:", out["rewards"])
        print("summary:", out["summary"])
    else:
        print("trajectory rewards:", out["trajectory_rewards"])
        print("response tokens per trajectory:", [len(ids) for ids in out["response_ids"]])
        print("loss-masked tokens (the model's own):", [sum(mask) for mask in out["loss_masks"]])


if __name__ == "__main__":
    main()
