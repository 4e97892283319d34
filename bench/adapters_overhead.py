"""Time per episode of each trainer adapter on the same scripted multi-turn episodes.

    python bench/adapters_overhead.py --episodes 64          # every adapter installed in this environment

Episodes are gsm8k_multi_turn rows with three scripted turns (two formatted wrong answers, then the
right one), replayed with the conformance kit's scripted engine, so the figures are the adapters' own
cost (tokenization, bookkeeping, env calls, batching), not a model's. "env (direct)" is the same
episodes stepped on the env without any adapter: the baseline. Prints one line per adapter.
The veRL figure includes what each call of veRL's path costs once (writing the rows as Parquet, reading
them with its RLHFDataset, building its AgentLoopWorker; the Hydra config is composed once, before
timing), so it falls with more episodes per call.
"""

from __future__ import annotations

import argparse
import time


def cases(count: int):
    from skygym_adapters.conformance import Case

    out = []
    for i in range(count):
        a, b = 17 + i, 5 + 2 * i
        row = {
            "data_source": "bench",
            "prompt": [{"role": "user", "content": f"Episode {i}: what is {a} + {b}? Answer after ####."}],
            "env_class": "gsm8k_multi_turn",
            "reward_spec": {"method": "rule", "ground_truth": str(a + b)},
            "extra_info": {"index": i},
            "max_turns": 3,
        }
        out.append(Case(row, [f"#### {a + b + 1}", f"I think #### {a + b + 2}", f"{a} + {b} = {a + b}\n#### {a + b}"]))
    return out


def best_of(repeats: int, fn):
    """(fastest seconds, result) over ``repeats`` runs of ``fn``; adapters reset their scripted engine per run."""
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3, help="report the best of this many runs")
    parser.add_argument("--model", default=None, help="model folder whose tokenizer the token adapters use")
    args = parser.parse_args(argv)

    from pathlib import Path

    from skygym_adapters.conformance import Context, default_adapters, play_reference

    episodes = cases(args.episodes)
    context = Context(model_dir=Path(args.model) if args.model else None)
    context.require_tokenizer()
    references = [play_reference(case) for case in episodes]  # also warms up imports
    direct = best_of(args.repeats, lambda: [play_reference(case) for case in episodes])[0]
    turns = sum(ref.turns for ref in references)
    print(f"{args.episodes} episodes, {turns} turns (gsm8k_multi_turn, scripted)")
    print(f"{'adapter':<14}{'seconds':>10}{'episodes/s':>12}{'ms/turn':>10}")
    print(f"{'env (direct)':<14}{direct:>10.3f}{args.episodes / direct:>12.1f}{1000 * direct / turns:>10.3f}")
    for adapter in default_adapters():
        available, reason = adapter.available()
        if not available:
            print(f"{adapter.name:<14}  skipped: {reason}")
            continue
        adapter.run(episodes[:2], context, references[:2])  # warm up imports and caches
        seconds, runs = best_of(args.repeats, lambda: adapter.run(episodes, context, references))
        errors = sum(1 for run in runs if run.error)
        note = f"  ({errors} errors)" if errors else ""
        print(f"{adapter.name:<14}{seconds:>10.3f}{args.episodes / seconds:>12.1f}{1000 * seconds / turns:>10.3f}{note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
