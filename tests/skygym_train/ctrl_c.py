"""Ctrl-C for real: a training command in a subprocess, SIGINT once its output shows a line, to its whole
process group as a terminal sends it (Ray's processes, when it starts them, get it too)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from typing import Any, List, Optional, Sequence, Tuple


def interrupt_after(args: Sequence[str], *markers: str, timeout: float = 300,
                    program: Optional[Sequence[str]] = None, signum: int = signal.SIGINT,
                    group: bool = True, **popen: Any) -> Tuple[int, str]:
    """Run ``python -u ARGS`` (or ``PROGRAM ARGS``; ``popen`` adds ``cwd`` or ``env``), in a session of its
    own, and send its process group (or, not ``group``, the process alone, as ``kill PID`` and ``timeout`` do) one
    SIGINT (or ``signum``) at each of ``markers``, in turn, once a line of its output (stdout and stderr together)
    contains it. Returns its exit status and its whole output; one still running
    after ``timeout`` seconds (a hang at exit) is killed, and its status is -9."""
    command = [*(program or (sys.executable, "-u")), *args]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True, **popen)
    lines: List[str] = []
    waiting = list(markers)
    assert process.stdout is not None
    watchdog = threading.Timer(timeout, process.kill)
    watchdog.start()
    try:
        for line in process.stdout:
            lines.append(line)
            if waiting and waiting[0] in line:
                (os.killpg if group else os.kill)(process.pid, signum)
                waiting.pop(0)
        return process.wait(), "".join(lines)
    finally:
        watchdog.cancel()
        if process.poll() is None:
            process.kill()
            process.wait()
        try:  # whatever it started and left behind
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
