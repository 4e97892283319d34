"""``skyrl-gym step ID``: drive an env by hand, one action at a time, from the terminal or a pipe.

    skyrl-gym step gsm8k --row data/gsm8k.jsonl --index 3          # type answers, see rewards
    printf 'no idea\\n#### 72\\n' | skyrl-gym step gsm8k_multi_turn --prompt "..." --extras '{...}'

Each line of stdin is one action; with ``--multiline`` an action is a block of lines ended by a line
holding a single ``.``. The episode ends when the env says done or stdin ends.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Dict, Iterator, List, Optional, TextIO

from skyrl_gym.cli._io import UsageError, error, load_row, parse_json_arg, to_json

END_OF_BLOCK = "."


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "step",
        help="drive an env by hand: give a row or a prompt, type actions, see observations and rewards",
        description="Actions are read from stdin, one per line (or, with --multiline, blocks of lines ended by "
        "a line with a single '.'). Exit code 0 when the episode ran (done or stdin ended), 1 when the env "
        "raised, 2 on bad arguments.",
    )
    parser.add_argument("env_id", metavar="ID")
    source = parser.add_argument_group("episode (a row, or a prompt and extras)")
    source.add_argument("--row", metavar="FILE", help="rows file (JSONL, JSON or Parquet)")
    source.add_argument("--index", type=int, default=0, help="row of --row to play (default 0)")
    source.add_argument("--prompt", metavar="TEXT", help="the user message to start with")
    source.add_argument("--extras", metavar="JSON", help="the row's extras, e.g. '{\"reward_spec\": {...}}'")
    parser.add_argument("--env-config", metavar="JSON", help="env_config as JSON, or @file.json")
    parser.add_argument("--multiline", action="store_true", help="actions are blocks ended by a line '.'")
    parser.add_argument("--json", action="store_true", help="print one JSON object per event")
    parser.set_defaults(func=run_step)


def read_actions(stream: TextIO, multiline: bool, interactive: bool) -> Iterator[str]:
    """Actions from ``stream``: one per line, or blocks ended by a line with a single ``.``."""
    block: List[str] = []
    while True:
        if interactive:
            print("... " if block else "action> ", end="", file=sys.stderr, flush=True)
        line = stream.readline()
        if not line:  # end of input: a last unterminated block still counts
            if block:
                yield "\n".join(block)
            return
        line = line[:-1] if line.endswith("\n") else line
        if not multiline:
            yield line
        elif line == END_OF_BLOCK:
            yield "\n".join(block)
            block = []
        else:
            block.append(line)


class _Printer:
    def __init__(self, as_json: bool):
        self.as_json = as_json

    def messages(self, title: str, messages: Any) -> None:
        if self.as_json:
            return
        print(f"== {title}")
        if not messages:
            print("   (no messages)")
        for message in messages or []:
            if isinstance(message, dict):
                print(f"[{message.get('role', '?')}] {message.get('content', '')}")
            else:
                print(f"   {message!r}")

    def event(self, **fields: Any) -> None:
        if self.as_json:
            print(to_json(fields), flush=True)


def _episode_inputs(args: argparse.Namespace) -> tuple:
    if args.row and (args.prompt or args.extras):
        raise UsageError("give either --row FILE [--index N] or --prompt TEXT [--extras JSON], not both")
    if args.row:
        return load_row(args.row, args.index)
    extras = parse_json_arg(args.extras, "--extras", default={})
    if not isinstance(extras, dict):
        raise UsageError(f"--extras must be a JSON object, got {type(extras).__name__}")
    prompt = [{"role": "user", "content": args.prompt}] if args.prompt is not None else []
    return prompt, extras


def run_step(args: argparse.Namespace, stdin: Optional[TextIO] = None) -> int:
    import skyrl_gym
    from skyrl_gym.errors import DataError, UnregisteredEnv

    stdin = stdin or sys.stdin
    out = _Printer(args.json)
    try:
        prompt, extras = _episode_inputs(args)
        env_config = parse_json_arg(args.env_config, "--env-config", default={})
        skyrl_gym.spec(args.env_id)
    except (UsageError, UnregisteredEnv, DataError, FileNotFoundError) as exc:
        error(str(exc))
        return 2
    try:
        env = skyrl_gym.make(args.env_id, env_config=env_config, extras=extras)
    except Exception as exc:  # the env's constructor rejected the row
        error(f"building env {args.env_id!r} raised {type(exc).__name__}: {exc}")
        return 1

    with env:
        try:
            observation, info = env.init(prompt)
        except Exception as exc:
            error(f"init() raised {type(exc).__name__}: {exc}")
            return 1
        out.messages(f"{args.env_id}: prompt", observation)
        out.event(event="init", observations=observation, info=info, max_turns=getattr(env, "max_turns", None))

        turns, total_reward, done = 0, 0.0, False
        for action in read_actions(stdin, args.multiline, interactive=stdin.isatty()):
            turns += 1
            try:
                result: Dict[str, Any] = dict(env.step(action))
            except Exception as exc:
                error(f"step() on turn {turns} raised {type(exc).__name__}: {exc}")
                out.event(event="error", turn=turns, error=f"{type(exc).__name__}: {exc}")
                return 1
            done = bool(result.get("done"))
            reward = result.get("reward")
            if isinstance(reward, (int, float)):
                total_reward += reward
            out.messages(f"turn {turns}: observations", result.get("observations"))
            if not args.json:
                print(f"reward: {reward}   done: {done}")
                print(f"metadata: {to_json(result.get('metadata'))}")
            out.event(event="step", turn=turns, action_chars=len(action), observations=result.get("observations"),
                      reward=reward, done=done, metadata=result.get("metadata"))
            if done:
                break
        summary = f"episode {'done' if done else 'not done (input ended)'} after {turns} turn(s), total reward {total_reward:g}"
        if not args.json:
            print(f"== {summary}")
        out.event(event="end", done=done, turns=turns, total_reward=total_reward)
    return 0
