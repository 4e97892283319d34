"""Mathematical equivalence with ``math-verify``, bounded in time.

``math-verify`` (through sympy) can take seconds or hang on adversarial input, and its own time
limits use ``SIGALRM``, which only works in a process's main thread. So the check runs in a small
helper process (:mod:`skyrl_gym.rewards._math_worker`): on time-out the helper is killed and replaced, and the
caller gets ``False`` with the reason. Cheap cases (equal strings after normalisation, two plain numbers) never leave the process.
"""

from __future__ import annotations

import atexit
import dataclasses
import importlib.util
import json
import math
import os
import select
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Optional

from skyrl_gym.rewards import _math_worker  # what the helper runs (and so part of the reward's fingerprint)
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


class _VerifyHelper:
    """One helper process, restarted after a time-out or a death; calls are serialised by a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: Optional[subprocess.Popen] = None
        self._replies = b""  # what the helper wrote past its last whole answer
        self._ended = False  # set by _VerifyPool.close(): the call in progress gets an error, not a second try

    def _start(self) -> None:
        # A fresh interpreter with this one's sys.path (not multiprocessing: see skyrl_gym.rewards._math_worker);
        # it ends when its input closes, with this process.
        code = f"import sys; sys.path[:0] = {sys.path!r}; from {_math_worker.__name__} import serve; serve()"
        self._process = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self._replies = b""

    def _kill(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            process.kill()
            process.wait(timeout=5)
            for pipe in (process.stdin, process.stdout):
                try:
                    pipe.close()
                except OSError:
                    pass

    def _reply(self, timeout: float) -> Optional[bytes]:
        """The helper's next answer line, or None at ``timeout``; EOFError once it has ended."""
        deadline = time.monotonic() + timeout
        fd = self._process.stdout.fileno()
        while b"\n" not in self._replies:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                raise EOFError("the helper ended")
            self._replies += chunk
        line, _, self._replies = self._replies.partition(b"\n")
        return line

    def _ask(self, prediction: str, gold: str, timeout: float) -> MathVerdict:
        """One request, on a helper started if there is none; raises EOFError or OSError (BrokenPipeError among
        them) when the helper dies before it answers."""
        if self._process is None or self._process.poll() is not None:
            self._kill()
            self._start()
            timeout += 10.0  # the first call also pays for starting Python and importing sympy
        try:
            self._process.stdin.write((json.dumps([prediction, gold]) + "\n").encode("utf-8"))
            self._process.stdin.flush()
            line = self._reply(timeout)
            if line is None:
                self._kill()
                return MathVerdict(False, "timeout")
            equal, reason = json.loads(line)
        except (EOFError, OSError, ValueError):
            self._kill()
            raise EOFError("the helper ended before it answered") from None
        return MathVerdict(bool(equal), str(reason))

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
            idle = [helper for helper in helpers if helper in self._free]
        for helper in helpers:
            process = helper._process
            helper._ended = True
            if helper in idle and helper._lock.acquire(blocking=False):
                try:
                    helper._kill()  # its pipes closed too
                finally:
                    helper._lock.release()
            elif process is not None:
                process.kill()  # without the helper's lock: a busy helper's call sees its pipe close, and closes it


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
