"""The math-verify helper process of :mod:`skyrl_gym.rewards.math`: a JSON line ``[prediction, gold]`` in, a JSON
line ``[equal, reason]`` out, until its input closes.

It is started as ``python -c`` with the caller's ``sys.path``, not through :mod:`multiprocessing`: a spawned
process imports the caller's main script again, and a script without an ``if __name__ == "__main__":`` guard
then ran again in the helper, which died, and a right answer scored 0.0.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys


def serve() -> None:
    # Ctrl-C in a terminal reaches the whole process group: the trainer finishes its step (whose math rewards this
    # helper computes) and then stops, closing this helper's input
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    sys.stdout = sys.stderr  # whatever sympy or math-verify print cannot reach the answers
    from math_verify import parse, verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)  # the caller bounds the time; silence its warning
    for line in sys.stdin:
        prediction, gold = json.loads(line)
        try:
            # Wrap in $...$ so that plain LaTeX and plain numbers both parse.
            gold_parsed = parse(f"${gold}$", parsing_timeout=None)
            prediction_parsed = parse(f"${prediction}$", parsing_timeout=None)
            if not gold_parsed or not prediction_parsed:
                answer = [False, "math-verify could not parse the answer"]
            else:
                answer = [bool(verify(gold_parsed, prediction_parsed, timeout_seconds=None)), "math-verify"]
        except Exception as exc:  # sympy raises all sorts of things on odd input
            answer = [False, f"error: {type(exc).__name__}: {exc}"[:200]]
        channel.write(json.dumps(answer) + "\n")
        channel.flush()
