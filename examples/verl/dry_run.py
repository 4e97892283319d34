"""Check a veRL setup on a CPU: veRL's own agent-loop worker, in this process.

    python examples/verl/dry_run.py --rows ~/data/skyrl_gym/gsm8k_multi_turn/test.parquet --limit 4 --model smollm2-135m

Loads examples/verl/gsm8k_multi_turn.yaml (veRL's ppo_trainer plus our settings), reads the rows with
veRL's RLHFDataset, rolls them out with veRL's AgentLoopWorker (the skyrl_gym agent loop for rows whose
agent_name says so) served by a transformers model, and prints each episode: turns, per-turn rewards (the
env's, as the agent loop records them; veRL's reward worker is not run), how many response tokens are the
model's (mask 1) and the env's (mask 0). The first --limit rows and the agent-loop config it writes go to a
temporary folder, removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", required=True, help="a veRL Parquet file (examples/verl/prepare_gsm8k.py)")
    parser.add_argument("--model", default="smollm2-135m", help="model name or folder (skygym_adapters.models.resolve_model)")
    parser.add_argument("--limit", type=int, default=4)
    parser.add_argument("--max_tokens_per_turn", type=int, default=64)
    parser.add_argument("--response_length", type=int, default=512)
    args = parser.parse_args(argv)

    import importlib.util

    from skyrl_gym.extras import install_command

    if importlib.util.find_spec("verl") is None:  # veRL composes its config with hydra, imported when it is used
        raise SystemExit(f"error: this example needs the 'verl' extra (verl is not installed): {install_command('verl')}")
    if not Path(args.rows).is_file():
        raise SystemExit(f"error: --rows {args.rows}: no such file (make it with examples/verl/prepare_gsm8k.py)")
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    from skygym_adapters.engines.hf import HFEngine
    from skygym_adapters.models import fit_cpu_threads_to_load, resolve_model
    from skygym_adapters.verl.local import compose_config, generate_sequences, load_batch
    from skygym_adapters.verl.server import EngineServerManager

    model_dir = resolve_model(args.model).path
    with tempfile.TemporaryDirectory(prefix="skyrl-gym-verl-dry-run-") as scratch_name:
        scratch = Path(scratch_name)
        rows_file = Path(args.rows)
        if args.limit:
            limited = scratch / f"{rows_file.stem}.first{args.limit}.parquet"
            pq.write_table(pq.read_table(rows_file).slice(0, args.limit), limited)
            rows_file = limited
        loop_file = scratch / "agent_loop.dry_run.yaml"
        loop_file.write_text(
            (HERE / "agent_loop.yaml").read_text().replace("max_tokens_per_turn: null", f"max_tokens_per_turn: {args.max_tokens_per_turn}")
        )
        config = compose_config(
            model_dir,
            [
                f"data.train_files={rows_file}",
                f"data.max_response_length={args.response_length}",
                f"actor_rollout_ref.rollout.agent.agent_loop_config_path={loop_file}",
            ],
            config_dir=HERE,
            config_name="gsm8k_multi_turn",
        )
        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        batch = load_batch(rows_file, config, tokenizer)
        engine = HFEngine(str(model_dir))
        busy, _ = fit_cpu_threads_to_load()  # a busy CPU: fewer torch threads (this script owns its process)
        if busy:
            print(busy)
        try:
            output = asyncio.run(generate_sequences(config, EngineServerManager(engine), batch))
        finally:
            engine.close()
        extra = output.non_tensor_batch
        prompt_length = output.batch["prompts"].shape[1]
        for i in range(len(output)):
            length = int(output.batch["attention_mask"][i, prompt_length:].sum())
            mask = output.batch["response_mask"][i, :length].tolist()
            rewards = ", ".join(f"{r:.3f}" for r in extra["turn_scores"][i])
            print(
                f"row {i}: env={extra['skyrl_gym_env_class'][i]} turns={extra['assistant_turns'][i]} "
                f"turn_rewards=[{rewards}] reward={extra['skyrl_gym_reward'][i]:.3f} "
                f"model_tokens={sum(mask)} env_tokens={len(mask) - sum(mask)} stop={extra['stop'][i]}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
