"""The soak: many hostile and honest runs at once, each with a unique marker, on one sandbox.

Every program prints ``RUN:<its marker>`` first. Afterwards a result must show its own marker and
no other: a foreign marker on a ``RUN:`` line is a *misattributed* result (a reply delivered to
the wrong caller); any other foreign marker is a *trace* (something one run left that another
saw: a file, memory, a process). Peeker programs look for traces on purpose: in the scratch area,
/tmp, /dev/shm, /dev and their own memory. Honest programs must also succeed with the right
output and fetched file (availability). Used by ``tests/sandboxes/test_soak.py`` (a few hundred
runs) and ``bench/sandbox_soak.py`` (10,000 and more).
"""

from __future__ import annotations

import collections
import textwrap
import concurrent.futures
import random
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from skygym_sandboxes import Limits, RunRequest, RunResult, Status

MARKER = re.compile(r"SOAK-[0-9a-f]{32}-END")

# Program text (run inside a sandbox) that adds every match of ``pattern`` in the program's own readable memory to
# the set ``found``; shared by the soak's peekers and the hostile-run tests.
MEMORY_SCAN = r"""
with open("/proc/self/mem", "rb", buffering=0) as mem:
    for line in open("/proc/self/maps"):
        fields = line.split()
        if "r" not in fields[1] or line.rstrip().endswith(("[vvar]", "[vsyscall]", "[vvar_vclock]")):
            continue
        start, end = (int(part, 16) for part in fields[0].split("-"))
        tail = b""
        while start < end:
            size = min(1 << 20, end - start)
            try:
                mem.seek(start)
                chunk = tail + mem.read(size)
            except (OSError, ValueError, OverflowError):
                break
            found.update(pattern.findall(chunk))
            tail = chunk[-64:]
            start += size
"""

PEEK = r"""
import ctypes, os, re
ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # dumpable, so that /proc/self/mem can be read
mine = input()
print("RUN:" + mine, flush=True)
pattern = re.compile(rb"SOAK-[0-9a-f]{32}-END")
found = set()
for top in ("/sandbox", "/tmp", "/dev/shm", "/dev", os.getcwd()):
    for folder, dirs, names in os.walk(top):
        for name in dirs + names:
            path = os.path.join(folder, name)
            found.update(pattern.findall(os.fsencode(path)))
            try:
                if os.path.isfile(path) and not os.path.islink(path):
                    with open(path, "rb") as handle:
                        found.update(pattern.findall(handle.read(1 << 20)))
            except OSError:
                pass
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            found.update(pattern.findall(open("/proc/%s/cmdline" % pid, "rb").read()))
        except OSError:
            pass
if SCAN_MEMORY:
""" + textwrap.indent(MEMORY_SCAN, "    ") + r"""for item in sorted(found):
    if item.decode() != mine:
        print("SEEN:" + item.decode())
"""

HEAD = "import os, sys\nmine = input()\nprint('RUN:' + mine, flush=True)\n"

HOSTILE = {
    "leaver": HEAD
    + "for path in ('left.txt', '/tmp/left.txt', '/dev/shm/left.txt', '/sandbox/left.txt', '/dev/left.txt'):\n"
    "    try:\n        open(path, 'w').write(mine)\n    except OSError:\n        pass\n"
    "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        import time\n"
    "        keep = mine * 1000\n        time.sleep(60)\n    os._exit(0)\n",
    "flood": HEAD + "while True:\n    sys.stdout.write(mine * 1000)\n",
    "fork_bomb": HEAD + "while True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
    "sleeper": HEAD + "import time\ntime.sleep(3600)\n",
    "signaller": HEAD
    + "import signal\nfor target in (1, os.getppid()):\n    for sig in (2, 15, 1, 10, 12, 19, 9):\n"
    "        try:\n            os.kill(target, sig)\n        except OSError:\n            pass\n"
    "os.kill(-1, 9)\n",
    "deep_tree": HEAD + "for _ in range(3000):\n    os.mkdir(mine)\n    os.chdir(mine)\nopen('leaf', 'w').write(mine)\n",
    "crasher": HEAD + "os.abort()\n",
    "memory": HEAD + "hoard = []\nwhile True:\n    hoard.append(bytearray(32 * 2**20))\n",
    "fd_games": HEAD
    + "import json, struct\nfake = json.dumps({'id': 'x', 'status': 'ok', 'stdout_bytes': 0}).encode()\n"
    "os.write(1, struct.pack('>I', len(fake)) + fake)\n"
    "for fd in range(3, 64):\n    try:\n        os.write(fd, mine.encode())\n    except OSError:\n        pass\n"
    "os.closerange(0, 1024)\n",
}
HONEST = ("honest", "honest_command", "peeker")


def new_marker() -> str:
    return f"SOAK-{uuid.uuid4().hex}-END"


def make_run(kind: str, mark: str, limits: Limits, scan_memory: bool) -> RunRequest:
    short = limits.replace(wall_s=min(limits.wall_s or 1.0, 1.0))
    if kind == "honest":
        code = HEAD + "assert open('in.txt').read() == mine\nopen('out.txt', 'w').write(mine)\nprint(sum(range(10)))\n"
        # Lifted limits (lowered to the maxima) must not confuse anything either.
        lifted = random.random() < 0.3
        return RunRequest(
            code=code,
            stdin=mark,
            files={"in.txt": mark},
            fetch_files=["out.txt", "./out.txt"],
            limits=limits.replace(wall_s=1e10, cpu_s=1e10) if lifted else limits,
        )
    if kind == "honest_command":
        return RunRequest(command=["sh", "-c", 'read m; echo "RUN:$m"; echo 45'], stdin=mark + "\n", limits=limits)
    if kind == "peeker":
        return RunRequest(code=f"SCAN_MEMORY = {scan_memory!r}\n" + PEEK, stdin=mark, limits=limits)
    return RunRequest(code=HOSTILE[kind], stdin=mark, limits=short)


@dataclass
class SoakReport:
    runs: int = 0
    misattributed: int = 0
    traces: int = 0
    honest_failures: int = 0
    elapsed_s: float = 0.0
    statuses: Dict[str, collections.Counter] = field(default_factory=lambda: collections.defaultdict(collections.Counter))
    problems: List[str] = field(default_factory=list)
    sandbox_errors: List[str] = field(default_factory=list)  # of hostile runs: allowed, but shown

    def summary(self) -> str:
        lines = [
            f"runs: {self.runs} in {self.elapsed_s:.1f}s ({self.runs / max(self.elapsed_s, 1e-9):.1f} runs/s)",
            f"misattributed results: {self.misattributed}",
            f"traces of one run seen by another: {self.traces}",
            f"honest runs that failed: {self.honest_failures}",
        ]
        for kind in sorted(self.statuses):
            counts = ", ".join(f"{status} {n}" for status, n in sorted(self.statuses[kind].items()))
            lines.append(f"  {kind:<15} {counts}")
        lines += [f"  problem: {problem}" for problem in self.problems[:20]]
        lines += [f"  sandbox_error of a hostile run: {message}" for message in self.sandbox_errors[:10]]
        return "\n".join(lines)


def check(kind: str, mark: str, result: RunResult, report: SoakReport) -> None:
    text = result.stdout + "\n" + result.stderr + "\n" + result.message
    report.statuses[kind][str(result.status)] += 1
    if result.status == Status.SANDBOX_ERROR and kind not in HONEST:
        report.sandbox_errors.append(f"{kind}: {result.message[:300]}")
    run_lines = [line[4:] for line in result.stdout.splitlines() if line.startswith("RUN:")]
    foreign_runs = [line for line in run_lines if MARKER.fullmatch(line) and line != mark]
    if foreign_runs:
        report.misattributed += 1
        report.problems.append(f"{kind} {mark} got the result of {foreign_runs[0]}")
        return
    foreign = sorted({found for found in MARKER.findall(text) if found != mark})
    if foreign:
        report.traces += 1
        report.problems.append(f"{kind} {mark} saw {foreign[:3]}")
    for name, data in result.files.items():
        import base64

        content = base64.b64decode(data).decode("utf-8", "replace")
        if any(found != mark for found in MARKER.findall(content)):
            report.misattributed += 1
            report.problems.append(f"{kind} {mark} fetched another run's file {name}")
    if kind in HONEST:
        good = result.status == Status.OK and mark in run_lines
        if kind == "honest":
            import base64

            good = good and result.files == {"out.txt": base64.b64encode(mark.encode()).decode()}
            good = good and result.stdout.endswith("45\n")
        if kind == "honest_command":
            good = good and result.stdout == f"RUN:{mark}\n45\n"
        if not good:
            report.honest_failures += 1
            report.problems.append(f"{kind} {mark} failed: {result.status} {result.message[:200]}")


def soak(
    run: Callable[[RunRequest], RunResult],
    runs: int,
    limits: Limits,
    concurrency: int = 4,
    hostile_share: float = 0.5,
    memory_scan_share: float = 0.2,
    seed: Optional[int] = None,
    progress: Optional[Callable[[int], None]] = None,
) -> SoakReport:
    """``runs`` runs through ``run`` (a sandbox's ``run``), ``concurrency`` at a time."""
    rng = random.Random(seed)
    plan: List[Tuple[str, str, bool]] = []
    for _ in range(runs):
        kind = rng.choice(sorted(HOSTILE)) if rng.random() < hostile_share else rng.choice(HONEST)
        plan.append((kind, new_marker(), rng.random() < memory_scan_share))
    report = SoakReport(runs=runs)
    lock = threading.Lock()
    done = [0]

    def one(item: Tuple[str, str, bool]) -> None:
        kind, mark, scan = item
        result = run(make_run(kind, mark, limits, scan))
        with lock:
            check(kind, mark, result, report)
            done[0] += 1
            if progress is not None and done[0] % 500 == 0:
                progress(done[0])

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
        for future in [pool.submit(one, item) for item in plan]:
            future.result()
    report.elapsed_s = time.monotonic() - started
    return report
