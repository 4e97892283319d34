"""Evaluate a scripted agent that replays each instance's gold patch through the env's tools.

    python examples/swe/replay_gold.py out/swe/instances.jsonl [--limit 5]

Every episode starts a container, edits files with `str_replace_editor` (one call per hunk of the gold
patch), submits, and is graded in a fresh container with the hidden tests: every reward is 1.0 when the
instances are sound. It is the tool path end to end, without a model.
"""

import argparse
import time

import skyrl_gym
from skyrl_gym.envs.swe.dataset import instance_row
from skyrl_gym.envs.swe.instances import load_instances
from skyrl_gym.envs.swe.replay import replay_actions
from skyrl_gym.episode import ScriptedPolicy, run_episode, run_sync


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("instances")
    parser.add_argument("--limit", type=int, default=5)
    args = parser.parse_args()
    rewards = []
    for instance in load_instances(args.instances, limit=args.limit):
        row = instance_row(instance)
        started = time.monotonic()
        episode = run_sync(
            run_episode(lambda: skyrl_gym.make("swe", extras=row), row["prompt"], ScriptedPolicy(replay_actions(instance.patch)))
        )
        rewards.append(episode.total_reward)
        print(f"{instance.instance_id:32} reward {episode.total_reward:.1f}  turns {episode.num_turns}  "
              f"{time.monotonic() - started:.1f} s  {episode.error or ''}")
    print(f"mean reward {sum(rewards) / max(1, len(rewards)):.2f} over {len(rewards)} instances")


if __name__ == "__main__":
    main()
