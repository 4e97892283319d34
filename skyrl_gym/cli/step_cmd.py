"""``skyrl-gym step ID``: drive an env by hand, one action at a time, from the terminal or a pipe.

    skyrl-gym step gsm8k --row data/gsm8k.jsonl --index 3          # type answers, see rewards
    printf 'no idea\\n#### 72\\n' | skyrl-gym step gsm8k_multi_turn --prompt "..." --extras '{...}'

Each line of stdin is one action; with ``--multiline`` an action is a block of lines ended by a line
holding a single ``.``. The episode (played by the one episode driver, :mod:`skyrl_gym.episode`) ends when the
env says done, its ``max_turns`` is reached, or stdin ends.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Iterator, List, Optional, TextIO, Union

from skyrl_gym.cli._io import UsageError, env_config_arg, error, load_row, parse_json_arg, to_json
from skyrl_gym.episode import BasePolicy, Episode, EpisodeEnd, StepRecord, make_env_factory, run_episode, run_sync

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


class _StdinPolicy(BasePolicy):
    """The episode driver's policy for a person at the terminal (or a pipe): each action is read from stdin, and
    every observation is printed on the way."""

    def __init__(self, env_id: str, actions: Iterator[str], out: _Printer) -> None:
        self.env_id, self.actions, self.out = env_id, actions, out

    async def start(self, episode: Episode) -> Optional[EpisodeEnd]:
        self.out.messages(f"{self.env_id}: prompt", episode.prompt)
        self.out.event(event="init", observations=episode.prompt, info=episode.info, max_turns=episode.max_turns)
        return None

    async def act(self, episode: Episode) -> Union[str, EpisodeEnd]:
        return next(self.actions, EpisodeEnd.ABORTED)  # the input ended

    async def observe(self, episode: Episode, step: StepRecord) -> Optional[EpisodeEnd]:
        turn = episode.num_turns
        self.out.messages(f"turn {turn}: observations", step.observations)
        if not self.out.as_json:
            print(f"reward: {step.reward}   done: {step.done}")
            print(f"metadata: {to_json(step.metadata)}")
        self.out.event(event="step", turn=turn, action_chars=len(step.action), observations=step.observations,
                       reward=step.reward, done=step.done, metadata=step.metadata)
        return None


_ENDINGS = {EpisodeEnd.ENV_DONE: "done", EpisodeEnd.MAX_TURNS: "ended at max_turns",
            EpisodeEnd.ABORTED: "not done (input ended)"}


def run_step(args: argparse.Namespace, stdin: Optional[TextIO] = None) -> int:
    import skyrl_gym
    from skyrl_gym.errors import DataError, UnregisteredEnv

    stdin = stdin or sys.stdin
    out = _Printer(args.json)
    try:
        prompt, extras = _episode_inputs(args)
        skyrl_gym.spec(args.env_id)
        env_config = env_config_arg(args.env_config, [args.env_id], default={})
    except (UsageError, UnregisteredEnv, DataError, FileNotFoundError) as exc:
        error(str(exc))
        return 2
    policy = _StdinPolicy(args.env_id, read_actions(stdin, args.multiline, interactive=stdin.isatty()), out)
    episode = run_sync(run_episode(make_env_factory(args.env_id, env_config, extras), prompt, policy,
                                   env_class=args.env_id, row_max_turns=extras.get("max_turns")))
    if episode.end is EpisodeEnd.ERROR:
        what = {"make": f"building env {args.env_id!r}", "init": "init()",
                "step": f"step() on turn {episode.num_turns + 1}"}.get(episode.error_method or "", episode.error_method)
        hint = ""
        if episode.error_method == "make" and isinstance(episode.exception, DataError) and not args.row:
            # --prompt alone gives the env no row: say where its fields go
            hint = ("\n  with --prompt, give the rest of the row as --extras, e.g. --extras "
                    "'{\"reward_spec\": {\"ground_truth\": \"...\"}}' (the env's README shows its row)")
        error(f"{what} raised {type(episode.exception).__name__}: {episode.exception}{hint}")
        out.event(event="error", turn=episode.num_turns + 1, error=f"{type(episode.exception).__name__}: {episode.exception}")
        # a row the env refuses when it is built is the caller's input (exit 2), as a bad argument is
        return 2 if episode.error_method == "make" and isinstance(episode.exception, DataError) else 1
    done = episode.end is EpisodeEnd.ENV_DONE
    summary = (f"episode {_ENDINGS.get(episode.end, episode.end)} after {episode.num_turns} turn(s), "
               f"total reward {episode.total_reward:g}")
    if not args.json:
        print(f"== {summary}")
    out.event(event="end", done=done, turns=episode.num_turns, total_reward=episode.total_reward,
              end=episode.end.value if episode.end else None)
    return 0
