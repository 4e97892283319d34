"""Mathematical equivalence with ``math-verify``, bounded in time.

``math-verify`` (through sympy) can take seconds or hang on adversarial input, and its own time
limits use ``SIGALRM``, which only works in a process's main thread. So the check runs in a small
helper process: on time-out the helper is killed and replaced, and the caller gets ``False`` with the
reason. Cheap cases (equal strings after normalisation, two plain numbers) never leave the process.
"""

from __future__ import annotations

import atexit
import dataclasses
import importlib.util
import math
import multiprocessing
import os
import threading
from typing import Any, Dict, List, Optional

from skyrl_gym.rewards.boxed import last_boxed_content
from skyrl_gym.rewards.normalize import normalize_final_answer

DEFAULT_TIMEOUT_S = 5.0
MAX_ANSWER_CHARS = 2_000  # longer "answers" are not answers; do not feed them to sympy


@dataclasses.dataclass
class MathVerdict:
    equal: bool
    reason: str  # "string", "numeric", "math-verify", "timeout", "too long", "error: ..."


def _as_number(text: str) -> Optional[float]:
    # ASCII only: float() also reads look-alike digits (fullwidth, Arabic-Indic, math bold), which would let a
    # reply in spoofed digits be paid here while math-verify, the reference, rejects it (skyrl-gym audit).
    if not text.isascii():
        return None
    try:
        value = float(text.replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _verify_in_worker(connection: Any) -> None:
    import logging

    from math_verify import parse, verify  # imported once per helper process

    logging.getLogger("math_verify").setLevel(logging.ERROR)  # we bound time ourselves; silence its warning

    while True:
        try:
            request = connection.recv()
        except EOFError:
            return
        prediction, gold = request
        try:
            # Wrap in $...$ so that plain LaTeX and plain numbers both parse.
            gold_parsed = parse(f"${gold}$", parsing_timeout=None)
            prediction_parsed = parse(f"${prediction}$", parsing_timeout=None)
            if not gold_parsed or not prediction_parsed:
                connection.send((False, "math-verify could not parse the answer"))
            else:
                connection.send((bool(verify(gold_parsed, prediction_parsed, timeout_seconds=None)), "math-verify"))
        except Exception as exc:  # sympy raises all sorts of things on odd input
            connection.send((False, f"error: {type(exc).__name__}: {exc}"[:200]))


class _VerifyHelper:
    """One helper process, restarted after a time-out or a death; calls are serialised by a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: Optional[multiprocessing.process.BaseProcess] = None
        self._connection: Any = None
        self._ended = False  # set by _VerifyPool.close(): the call in progress gets an error, not a second try

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")  # fork is unsafe in threaded trainers
        parent_end, child_end = context.Pipe()
        process = context.Process(target=_verify_in_worker, args=(child_end,), daemon=True, name="skyrl-math-verify")
        process.start()
        child_end.close()
        self._process, self._connection = process, parent_end

    def _kill(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.join(timeout=5)
        if self._connection is not None:
            self._connection.close()
        self._process = self._connection = None

    def _ask(self, prediction: str, gold: str, timeout: float) -> MathVerdict:
        """One request, on a helper started if there is none; raises EOFError or OSError (BrokenPipeError among
        them) when the helper dies before it answers."""
        if self._process is None or not self._process.is_alive():
            self._kill()
            self._start()
            timeout += 10.0  # the first call also pays for starting Python and importing sympy
        try:
            self._connection.send((prediction, gold))
            if not self._connection.poll(timeout):
                self._kill()
                return MathVerdict(False, "timeout")
            equal, reason = self._connection.recv()
        except (EOFError, OSError):
            self._kill()
            raise
        return MathVerdict(equal, reason)

    def check(self, prediction: str, gold: str, timeout: float) -> MathVerdict:
        """A helper that died before answering (it can look alive for a moment after it died, say once it has
        sent its last answer) gets the request again on a fresh one, once: a reference answer scored 0 with
        "helper died" in a loaded test run. A request that kills a fresh helper too gets an error verdict, as
        does one whose helper :meth:`_VerifyPool.close` ended."""
        if importlib.util.find_spec("math_verify") is None:
            raise ImportError("the math reward needs the math-verify package: pip install math-verify")
        with self._lock:
            self._ended = False
            try:
                try:
                    return self._ask(prediction, gold, timeout)
                except (EOFError, OSError):
                    if self._ended:
                        raise
                    return self._ask(prediction, gold, timeout)
            except (EOFError, OSError) as exc:
                return MathVerdict(False, f"error: math-verify helper died ({exc})")

    def close(self) -> None:
        with self._lock:
            self._kill()


class _VerifyPool:
    """Up to ``size`` helper processes, each serving one call at a time: a call takes a free helper (starting
    one while fewer than ``size`` exist) and waits only when all are busy. One helper for the whole process
    made every caller wait behind the slowest: on ``serve-env`` a client sending expressions that time out
    held every other client's math reward for as long as it kept sending them."""

    def __init__(self, size: int) -> None:
        self._size = max(1, size)
        self._helpers: List[_VerifyHelper] = []
        self._free: List[_VerifyHelper] = []
        self._changed = threading.Condition()

    def check(self, prediction: str, gold: str, timeout: float) -> MathVerdict:
        with self._changed:
            while not self._free and len(self._helpers) >= self._size:
                self._changed.wait()
            if self._free:
                helper = self._free.pop()
            else:
                helper = _VerifyHelper()
                self._helpers.append(helper)
        try:
            return helper.check(prediction, gold, timeout)
        finally:
            with self._changed:
                self._free.append(helper)
                self._changed.notify()

    def close(self) -> None:
        """Ends every helper now, busy ones included (their calls get an error verdict); the next call starts
        one again."""
        with self._changed:
            helpers = list(self._helpers)
        for helper in helpers:
            process = helper._process
            helper._ended = True
            if process is not None:
                process.kill()  # without the helper's lock: a busy helper's call sees its pipe close


# Helpers start on demand: a single-threaded caller only ever starts one.
_helper = _VerifyPool(min(4, os.cpu_count() or 1) + 1)
atexit.register(_helper.close)


def math_equal(prediction: str, gold: str, timeout: float = DEFAULT_TIMEOUT_S) -> MathVerdict:
    """Whether ``prediction`` and ``gold`` are the same mathematical answer (``0.5`` and ``\\frac{1}{2}``)."""
    prediction, gold = str(prediction).strip(), str(gold).strip()
    if not prediction:
        return MathVerdict(False, "empty answer")
    if len(prediction) > MAX_ANSWER_CHARS:
        return MathVerdict(False, "too long")
    if prediction == gold or normalize_final_answer(prediction) == normalize_final_answer(gold):
        return MathVerdict(True, "string")
    prediction_number, gold_number = _as_number(prediction), _as_number(gold)
    if prediction_number is not None and gold_number is not None:
        equal = math.isclose(prediction_number, gold_number, rel_tol=1e-9, abs_tol=1e-9)
        return MathVerdict(equal, "numeric")
    return _helper.check(prediction, gold, timeout)


def compute_math_score(solution_str: str, ground_truth: str, timeout: float = DEFAULT_TIMEOUT_S) -> Dict[str, Any]:
    """Score the last boxed answer of ``solution_str``: ``{"score": 1.0 | 0.0, "pred": ..., "reason": ...}``."""
    prediction = last_boxed_content(solution_str)
    if prediction is None:
        return {"score": 0.0, "pred": None, "reason": "no \\boxed{} answer"}
    verdict = math_equal(prediction, ground_truth, timeout=timeout)
    return {"score": 1.0 if verdict.equal else 0.0, "pred": prediction, "reason": verdict.reason}
