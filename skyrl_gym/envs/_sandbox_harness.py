"""The trusted grading harness that runs *inside* a sandbox for the code envs (``humaneval``, ``lcb``).

Standard library only and self-contained. The host (:mod:`skyrl_gym.envs._grading`) runs it as one
sandboxed program per graded response: the program's files hold this module (compiled, plus its
source as a fall-back), and the run's stdin holds the secrets (a nonce made on the host for this run,
the tests, their expected outputs, HumanEval's ``check``). The host imports it too, for the literal
codec and :func:`stdout_matches`, so that both sides share one implementation.

Three kinds of processes, so that the verdict is something the candidate cannot write:

* the **harness** (the sandbox's own process) makes itself non-dumpable (no process of the same uid
  can open its ``/proc/<pid>/fd``, ``mem`` or ``environ``, nor ptrace it), reads the secrets from
  stdin, and never executes candidate code. It starts
* the **runner**, a *fresh* interpreter (``posix_spawn`` of ``python -I -S``: none of the harness's
  memory, secrets included, is copied into it) that is given only the public part of the job (the
  candidate's code, the preamble). For each test the harness hands the runner a set of pipe ends
  over a Unix socket; the runner forks
* a **candidate** process that holds only those pipes, as fds 0-4 (stdin, stdout, stderr, call
  requests, call replies), runs the candidate's code as ``__main__`` (``main.py``), and, for
  functional tests, then answers calls. Arguments and return values cross as Python literals
  (``repr`` on one side, a strict literal evaluator on the harness's side; HumanEval) or as JSON
  (``lcb``), never pickle: an object that is not a plain value (one whose ``__eq__`` always returns
  True, say) cannot cross.

The harness feeds stdin, reads stdout/stderr and call replies under its own deadlines, and makes
every comparison itself (stdin tests: output against expected output; functional tests: returned
value against expected value; HumanEval: the problem's own ``check`` runs in the harness with a proxy
for the candidate function). At the end it writes one line to its stdout, which no candidate process
has a handle on: the nonce, then the JSON report. A candidate that exits early, kills or stops a
process, hangs, or prints anything leaves no verdict or a failing one.
"""

import _socket
import io
import math
import os
import struct
import sys

HEADER = struct.Struct(">I")
MAX_DEPTH = 200
DETAIL_CHARS = 300
MEMORY_MARKERS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory")
CANDIDATE_FILE = "main.py"


# ----- values as Python literals -----------------------------------------------------------------
class NotLiteral(ValueError):
    """A value (or a text) that is not a plain Python literal."""


_FLOAT_NAMES = {"inf": math.inf, "nan": math.nan}
_COMPLEX_NAMES = {"infj": complex(0.0, math.inf), "nanj": complex(0.0, math.nan)}
PLAIN_TYPES = "None, bool, int, float, complex, str, bytes, list, tuple, set, frozenset, dict"


def plain_value(value, depth=0):
    """``value`` rebuilt from the built-in types only (subclasses become their base type)."""
    if depth > MAX_DEPTH:
        raise NotLiteral("the value is nested more than %d levels deep (or refers to itself)" % MAX_DEPTH)
    kind = type(value)
    if value is None or kind in (bool, int, float, complex, str, bytes):
        return value
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, complex):
        return complex(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bytes):
        return bytes(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [plain_value(item, depth + 1) for item in value]
        if isinstance(value, list):
            return items
        if isinstance(value, tuple):
            return tuple(items)
        return frozenset(items) if isinstance(value, frozenset) else set(items)
    if isinstance(value, dict):
        return {plain_value(k, depth + 1): plain_value(v, depth + 1) for k, v in value.items()}
    raise NotLiteral("a %s object is not a plain value (%s)" % (kind.__name__, PLAIN_TYPES))


def to_literal_text(value):
    """``repr`` of :func:`plain_value` of ``value``: text that :func:`from_literal_text` reads back."""
    return repr(plain_value(value))


def eval_trusted_literal(text):
    """Read a literal written by the harness (trusted): for the runner and candidate processes,
    which do not import ``ast`` (it costs more than the rest of their start-up)."""
    names = dict(_FLOAT_NAMES, **_COMPLEX_NAMES)
    names.update(__builtins__={}, set=set, frozenset=frozenset)
    return eval(text, names)


# ----- small helpers ------------------------------------------------------------------------------
def make_undumpable():
    """PR_SET_DUMPABLE=0: a process of the same uid can no longer open /proc/<pid>/{fd,mem,environ}
    of this one, nor ptrace it."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE = 4
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def write_all(fd, data):
    while data:
        data = data[os.write(fd, data) :]


def read_exact(fd, size):
    chunks = []
    while size:
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def send_with_fds(sock, data, fds):
    sock.sendmsg([data], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, struct.pack("%di" % len(fds), *fds))])


def recv_with_fds(sock, size=1 << 16, max_fds=8):
    data, ancillary, _, _ = sock.recvmsg(size, _socket.CMSG_LEN(max_fds * 4))
    fds = []
    for level, kind, payload in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            count = len(payload) // 4
            fds.extend(struct.unpack("%di" % count, payload[: count * 4]))
    return data, fds


def frame(data):
    return HEADER.pack(len(data)) + data


def read_frame(fd):
    header = read_exact(fd, HEADER.size)
    if header is None:
        return None
    return read_exact(fd, HEADER.unpack(header)[0])


# ----- the runner and the candidate processes -----------------------------------------------------
def runner_main(sock_fd):
    """A fresh interpreter that knows only the public job; forks one candidate process per request.
    Messages to the harness: ``ready`` once it can fork candidates, ``pid <pid>`` once a candidate
    process exists, ``exit <pid> <status>`` once it has ended.

    The runner holds no secret, but it makes itself (and so every candidate process it forks)
    non-dumpable all the same: no candidate process can then take over its socket to the harness
    or read another candidate process."""
    make_undumpable()
    job = eval_trusted_literal(sys.stdin.buffer.read().decode("utf-8", "surrogatepass"))
    sys.path[:] = [p for p in job.get("path") or [] if isinstance(p, str) and p]
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    for name in job.get("preload") or ():
        __import__(name)
    if job.get("preamble"):  # import the preamble's modules once, before any fork
        try:
            exec(compile(job["preamble"], "<preamble>", "exec"), {"__name__": "__preload__"})
        except BaseException:
            pass
    # The candidate's code goes where `python main.py` would have it, so that tracebacks show its lines.
    # (The harness read its own source from there before it started this runner.)
    try:
        with open(
            os.path.join(os.getcwd(), CANDIDATE_FILE), "w", encoding="utf-8", errors="surrogatepass"
        ) as handle:
            handle.write(job["code"])
    except OSError:
        pass
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET, 0, sock_fd)
    sock.send(b"ready")
    while True:
        try:
            message, fds = recv_with_fds(sock)
        except OSError:
            return 0
        if not message:
            return 0
        command = eval_trusted_literal(message.decode("utf-8"))
        pid = os.fork()
        if pid == 0:
            candidate_process(job, command, fds, sock_fd)  # never returns
        try:
            os.setpgid(pid, pid)
        except OSError:
            pass
        for fd in fds:
            os.close(fd)
        sock.send(b"pid %d" % pid)
        _, status = os.waitpid(pid, 0)
        sock.send(b"exit %d %d" % (pid, status))


def candidate_process(job, command, fds, sock_fd):
    """In the forked child: keep only the given pipes as fds 0.., run the candidate, exit."""
    exit_now = os._exit  # the candidate may replace os._exit; this process must still end here
    exit_code = 126
    try:
        os.close(sock_fd)
        os.setpgid(0, 0)
        import fcntl

        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 100) for fd in fds]
        for target, fd in enumerate(high):
            os.dup2(fd, target)
        os.closerange(len(high), 1 << 16)
        cpu_s = command.get("cpu_s")
        if cpu_s:
            import resource

            seconds = max(1, int(math.ceil(cpu_s)))
            _, hard = resource.getrlimit(resource.RLIMIT_CPU)
            if hard != resource.RLIM_INFINITY:
                seconds = min(seconds, hard)
                hard = min(hard, seconds + 1)
            else:
                hard = seconds + 1
            resource.setrlimit(resource.RLIMIT_CPU, (seconds, hard))  # SIGXCPU, then SIGKILL a second later
        exit_code = run_candidate(job, command)
    except BaseException as exc:  # nothing may escape a forked child
        try:
            os.write(2, ("grader: the candidate process could not start: %r\n" % (exc,)).encode())
        except BaseException:
            pass
    exit_now(exit_code)


def _exit_code_of(exc):
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    try:
        sys.stderr.write(str(exc.code) + "\n")
    except BaseException:
        pass
    return 1


def _candidate_traceback(exc):
    """The traceback from the first frame of the candidate's code on, as under ``python main.py``."""
    path = os.path.join(os.getcwd(), CANDIDATE_FILE)
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != path:
        tb = tb.tb_next
    import traceback

    return "".join(traceback.format_exception(type(exc), exc, tb))


def _print_candidate_exception(exc):
    sys.stderr.write(_candidate_traceback(exc))


def run_candidate(job, command):
    """Run the candidate's code as ``__main__`` (as ``python main.py`` would), then, when
    ``command["serve"]``, answer call requests on fd 3 with replies on fd 4."""
    import atexit
    import builtins

    if "random" in sys.modules:  # a fork would otherwise repeat the runner's random sequence
        sys.modules["random"].seed()
    sys.stdin = io.TextIOWrapper(
        io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8", errors="replace"
    )
    sys.stdout = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8", errors="backslashreplace"
    )
    sys.stderr = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(2, "w", closefd=False)),
        encoding="utf-8",
        errors="backslashreplace",
        line_buffering=True,
    )
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
    path = os.path.join(os.getcwd(), CANDIDATE_FILE)
    code = job["code"]
    sys.argv = [path]
    module = type(sys)("__main__")
    module.__file__ = path
    module.__builtins__ = builtins
    sys.modules["__main__"] = module
    namespace = module.__dict__
    exit_code = 0
    loaded = False
    try:
        if job.get("preamble"):
            exec(compile(job["preamble"], "<preamble>", "exec"), namespace)
        exec(compile(code, path, "exec"), namespace)
        loaded = True
    except SystemExit as exc:
        exit_code = _exit_code_of(exc)
    except BaseException as exc:
        try:
            _print_candidate_exception(exc)
        except BaseException:
            pass
        exit_code = 1
    if loaded and command.get("serve"):
        try:
            serve_calls(namespace, command.get("owner"))
        except SystemExit as exc:
            exit_code = _exit_code_of(exc)
        except BaseException as exc:
            try:
                _print_candidate_exception(exc)
            except BaseException:
                pass
            exit_code = 1
    try:
        if "threading" in sys.modules:  # wait for non-daemon threads, as the interpreter does at exit
            sys.modules["threading"]._shutdown()
    except BaseException:
        pass
    try:
        atexit._run_exitfuncs()
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            exit_code = exit_code or 120
    return exit_code


def serve_calls(namespace, owner_name):
    """Each request on fd 3 is ``L`` and ``(name, args, kwargs)`` as a literal, or ``J`` and
    ``[name, args, kwargs]`` as JSON (large JSON arguments decode much faster so); each reply on fd 4 is
    the returned value in the request's form (``V`` and a literal, or ``J`` and JSON), or ``E`` and the
    traceback of what the call raised, or ``N`` and why the value could not be sent."""
    while True:
        request = read_frame(3)
        if request is None:
            return
        as_json = request[:1] == b"J"
        try:
            if as_json:
                import json

                name, args, kwargs = json.loads(request[1:].decode("utf-8"))
            else:
                name, args, kwargs = eval_trusted_literal(request[1:].decode("utf-8"))
            owner = namespace.get(owner_name) if owner_name else None
            if isinstance(owner, type) and hasattr(owner, name):
                target = getattr(owner(), name)
            elif name in namespace:
                target = namespace[name]
            else:
                raise NameError("the code defines no function %r" % (name,))
            value = target(*args, **kwargs)
        except Exception as exc:
            reply = b"E" + _candidate_traceback(exc).encode("utf-8", "backslashreplace")
        else:
            try:
                if as_json:
                    reply = b"J" + json.dumps(value).encode("utf-8")
                else:
                    reply = b"V" + to_literal_text(value).encode("utf-8", "surrogatepass")
            except Exception as exc:  # NotLiteral, not JSON, or a container that fails while being read
                reply = b"N" + str(exc).encode("utf-8", "backslashreplace")
        sys.stdout.flush()
        write_all(4, frame(reply))


# ===== the runner's source ends here: below is the harness's own part =====
import ast
import json
import select
import signal
import time
import traceback
from decimal import Decimal, InvalidOperation

RUNNER_END = "# ===== the runner's source ends here"
# How the runner interpreter loads its own code from the first argv[1] bytes of its stdin.
RUNNER_LOADERS = {
    "marshal": "import marshal, sys; exec(marshal.loads(sys.stdin.buffer.read(int(sys.argv[1]))))",
    "source": "import sys; exec(compile(sys.stdin.buffer.read(int(sys.argv[1])), '<grader-runner>', 'exec'))",
}


def runner_source(source):
    """The runner's program: this module's source up to :data:`RUNNER_END`, then its entry point."""
    return source[: source.index(RUNNER_END)] + "\nsys.exit(runner_main(int(sys.argv[2])))\n"


# ----- comparing printed output ------------------------------------------------------------------
def _decimal_line(line):
    """The line's tokens as decimals, or None where one is no number. A NaN is none: it equals nothing, and
    comparing a signalling one (``sNaN``, which a program may print) raises instead of answering."""
    try:
        numbers = [Decimal(token) for token in line.split()]
    except (InvalidOperation, ValueError):
        return None
    return None if any(number.is_nan() for number in numbers) else numbers


def stdout_matches(actual, expected):
    """Line by line after stripping; a line also matches when its tokens are equal as decimals."""
    actual_lines = [line.strip() for line in actual.strip().split("\n")]
    expected_lines = [line.strip() for line in expected.strip().split("\n")]
    if len(actual_lines) != len(expected_lines):
        return False
    for got, want in zip(actual_lines, expected_lines):
        if got == want:
            continue
        got_numbers, want_numbers = _decimal_line(got), _decimal_line(want)
        if got_numbers is None or want_numbers is None or got_numbers != want_numbers:
            return False
    return True


def short(text, length=DETAIL_CHARS):
    return text if len(text) <= length else text[: length // 2] + " ...(cut)... " + text[-length // 2 :]


# ----- reading literals from a candidate (strictly) ---------------------------------------------------
def from_literal_text(text):
    """The value written by ``text``, a Python literal (``inf``, ``nan``, ``set()`` and
    ``frozenset(...)`` included); anything else raises :class:`NotLiteral`."""
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise NotLiteral("not a Python literal: %s" % (exc.__class__.__name__,)) from None
    try:
        return _literal(tree.body, 0)
    except RecursionError:
        raise NotLiteral("the literal is nested too deeply") from None


def _literal(node, depth):
    if depth > MAX_DEPTH:
        raise NotLiteral("the literal is nested more than %d levels deep" % MAX_DEPTH)
    if isinstance(node, ast.Constant):
        if node.value is None or type(node.value) in (bool, int, float, complex, str, bytes):
            return node.value
        raise NotLiteral("%r is not a plain value" % (node.value,))
    if isinstance(node, ast.Name):
        if node.id in _FLOAT_NAMES:
            return _FLOAT_NAMES[node.id]
        if node.id in _COMPLEX_NAMES:
            return _COMPLEX_NAMES[node.id]
        raise NotLiteral("the name %r is not a literal" % node.id)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        items = [_literal(item, depth + 1) for item in node.elts]
        if isinstance(node, ast.List):
            return items
        if isinstance(node, ast.Tuple):
            return tuple(items)
        return _hashable(lambda: set(items))
    if isinstance(node, ast.Dict):
        if any(key is None for key in node.keys):
            raise NotLiteral("** is not a literal")
        pairs = [(_literal(k, depth + 1), _literal(v, depth + 1)) for k, v in zip(node.keys, node.values)]
        return _hashable(lambda: dict(pairs))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _literal(node.operand, depth + 1)
        if type(operand) not in (int, float, complex):
            raise NotLiteral("a sign applies to numbers only")
        return -operand if isinstance(node.op, ast.USub) else +operand
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        left, right = _literal(node.left, depth + 1), _literal(node.right, depth + 1)
        if type(left) not in (int, float) or type(right) is not complex:
            raise NotLiteral("only complex numbers such as (1+2j) may add or subtract")
        return left + right if isinstance(node.op, ast.Add) else left - right
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("set", "frozenset")
        and not node.keywords
        and len(node.args) <= 1
    ):
        items = _literal(node.args[0], depth + 1) if node.args else ()
        if type(items) not in (list, tuple, set):
            raise NotLiteral("%s() takes a list, tuple or set literal" % node.func.id)
        maker = set if node.func.id == "set" else frozenset
        return _hashable(lambda: maker(items))
    raise NotLiteral("a %s expression is not a literal" % node.__class__.__name__)


def _hashable(build):
    try:
        return build()
    except TypeError as exc:
        raise NotLiteral("unhashable set member or dict key: %s" % exc) from None


# ----- the harness ----------------------------------------------------------------------------------
class CandidateFailed(BaseException):
    """The candidate process cannot answer (gone, too slow, not a literal): the test fails, and test
    code cannot catch this with ``except Exception``."""

    def __init__(self, verdict, detail):
        super().__init__(detail)
        self.verdict = verdict
        self.detail = detail


class CandidateRaised(Exception):
    """The candidate function raised; its traceback is in the message."""


class Session:
    """One candidate process, seen from the harness: the harness's ends of its pipes."""

    def __init__(self, harness, serve, stdin_data=b"", owner=None):
        self.harness = harness
        self.started = time.monotonic()
        pipes = [os.pipe() for _ in range(5 if serve else 3)]
        # The candidate's ends: stdin (read), stdout, stderr (write), requests (read), replies (write).
        child_ends = [pipes[0][0], pipes[1][1], pipes[2][1]] + ([pipes[3][0], pipes[4][1]] if serve else [])
        self.in_w, self.out_r, self.err_r = pipes[0][1], pipes[1][0], pipes[2][0]
        self.req_w, self.resp_r = (pipes[3][1], pipes[4][0]) if serve else (None, None)
        self.fds = {
            "in": self.in_w,
            "out": self.out_r,
            "err": self.err_r,
            "req": self.req_w,
            "resp": self.resp_r,
        }
        for fd in self.fds.values():
            if fd is not None:
                os.set_blocking(fd, False)
        self.out, self.err, self.resp = bytearray(), bytearray(), bytearray()
        self.pending = {"in": bytearray(stdin_data), "req": bytearray()}
        self.close_stdin_when_sent = True
        self.pid = None
        self.status = None  # the wait status once the runner reports the exit
        self.over_limit = False
        self.timed_out = False  # a deadline passed while waiting on this process
        command = repr({"serve": serve, "cpu_s": harness.timeout, "owner": owner}).encode()
        try:
            if harness.runner_gone:
                raise OSError("the runner process is gone")
            send_with_fds(harness.sock, command, child_ends)
        except OSError as exc:
            harness.runner_gone = True
            for name in list(self.fds):
                self.close(name)
            raise CandidateFailed("runtime_error", "no candidate process could start: %s" % exc) from None
        finally:
            for fd in child_ends:
                os.close(fd)
        self.harness.pump(self, self.started + harness.timeout, lambda: self.pid is not None)
        if self.pid is None:
            raise CandidateFailed(
                "runtime_error",
                "the runner started no candidate process (an earlier one may have stopped it)",
            )

    # fds ---------------------------------------------------------------------------------------
    def close(self, name):
        fd = self.fds.get(name)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
            self.fds[name] = None

    def exited(self):
        return self.status is not None or self.harness.runner_gone

    def drain(self):
        """Read what the pipes hold right now (the writers may be gone or stuck)."""
        for name in ("out", "err", "resp"):
            while self.fds.get(name) is not None:
                if not self.harness.read_some(self, name):
                    break

    def finish(self, grace_s=0.5):
        """Let the candidate process end by itself (end of requests: it flushes its output and exits)
        for at most ``grace_s``, then kill its process group, wait for the runner's report, and
        close every pipe."""
        if (
            self.pid is not None
            and not self.exited()
            and grace_s > 0
            and not (self.timed_out or self.over_limit)
        ):
            self.close("req")
            self.pending["in"].clear()
            self.close("in")
            self.harness.pump(self, time.monotonic() + grace_s, self.exited)
        if self.pid is not None:
            for kill in (os.killpg, os.kill):
                try:
                    kill(self.pid, signal.SIGKILL)
                except OSError:
                    pass
            self.harness.pump(self, time.monotonic() + 2.0, self.exited)
        self.drain()
        for name in list(self.fds):
            self.close(name)

    # results -------------------------------------------------------------------------------------
    def reply(self):
        if len(self.resp) < HEADER.size:
            return None
        size = HEADER.unpack(bytes(self.resp[: HEADER.size]))[0]
        if size > self.harness.output_bytes:  # a reply past the output limit (or garbage): never read it
            self.over_limit = True
            return None
        if len(self.resp) < HEADER.size + size:
            return None
        data = bytes(self.resp[HEADER.size : HEADER.size + size])
        del self.resp[: HEADER.size + size]
        return data

    def stderr_text(self):
        return self.err.decode("utf-8", "replace")

    def failure(self):
        """(verdict, detail) for a candidate process that ended or was stopped without succeeding."""
        stderr = self.stderr_text()
        if self.over_limit:
            return "output_limit", "output went past %d bytes" % self.harness.output_bytes
        if self.harness.runner_gone and self.status is None:
            return "runtime_error", short(stderr) or "the runner process was killed"
        status = self.status
        if status is not None and os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            if sig == signal.SIGXCPU or (sig == signal.SIGKILL and self.cpu_exhausted()):
                return "timeout", "CPU-time limit of %ss reached" % self.harness.timeout
            if any(marker in stderr[-4096:] for marker in MEMORY_MARKERS):
                return "memory", short(stderr)
            return "runtime_error", short(stderr) or "killed by signal %d" % sig
        if any(marker in stderr[-4096:] for marker in MEMORY_MARKERS):
            return "memory", short(stderr)
        code = os.WEXITSTATUS(status) if status is not None else None
        return "runtime_error", short(stderr) or "the program exited with code %s" % code

    def cpu_exhausted(self):
        return time.monotonic() - self.started >= self.harness.timeout * 0.5


class Harness:
    def __init__(self, payload):
        self.payload = payload
        self.timeout = float(payload["timeout"])
        self.output_bytes = int(payload.get("output_bytes") or 1_000_000)
        self.runner_gone = False
        self.runner_ready = False
        self.startup_s = float(payload.get("startup_s") or 5.0)
        self.sock = None
        self.runner = None
        self.messages = []

    # the runner ----------------------------------------------------------------------------------
    def start_runner(self, runner):
        """Hand the started runner (see :func:`spawn_runner`) the public part of the job."""
        self.runner, self.sock, job_w = runner
        public = {
            "code": self.payload["code"],
            "preamble": self.payload.get("preamble") or "",
            "path": sys.path,
            "preload": ["json"]
            if any(t.get("kind") == "call" for t in self.payload.get("tests") or ())
            else [],
        }
        try:
            write_all(job_w, repr(public).encode("utf-8", "surrogatepass"))
        finally:
            os.close(job_w)

    def wait_for_runner(self):
        """Wait (at most ``startup_s``) until the runner can fork candidates: the tests' own time
        limits start with their candidate processes, not with the runner's interpreter."""
        deadline = time.monotonic() + self.startup_s
        while not self.runner_ready and not self.runner_gone:
            now = time.monotonic()
            if now >= deadline:
                break
            try:
                readable, _, _ = select.select([self.sock.fileno()], [], [], deadline - now)
            except InterruptedError:
                continue
            if readable:
                self.on_message(None)
        if not self.runner_ready:
            raise RuntimeError(
                "the runner process %s"
                % ("died at start" if self.runner_gone else "did not start within %ss" % self.startup_s)
            )

    def stop_runner(self):
        if self.sock is not None:
            self.sock.close()
        if self.runner is not None:
            try:
                os.killpg(self.runner, signal.SIGKILL)
            except OSError:
                pass
            try:
                os.waitpid(self.runner, 0)
            except OSError:
                pass

    def on_message(self, session):
        try:
            data = self.sock.recv(1 << 16)
        except OSError:
            data = b""
        if not data:
            self.runner_gone = True
            return
        if data == b"ready":
            self.runner_ready = True
            return
        words = data.split()
        try:
            numbers = [int(word) for word in words[1:]]
        except ValueError:
            numbers = []
        if session is None:
            return
        if words[:1] == [b"pid"] and len(numbers) == 1 and numbers[0] > 1:
            session.pid = numbers[0]
        elif words[:1] == [b"exit"] and len(numbers) == 2 and session.pid == numbers[0]:
            session.status = numbers[1]

    # moving bytes ---------------------------------------------------------------------------------
    def read_some(self, session, name):
        fd = session.fds[name]
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return False
        except OSError:
            chunk = b""
        if not chunk:
            session.close(name)
            return False
        buffer = {"out": session.out, "err": session.err, "resp": session.resp}[name]
        room = self.output_bytes - len(buffer)
        if name == "resp":
            room = self.output_bytes + HEADER.size + 1 - len(buffer)
        buffer.extend(chunk[: max(room, 0)])
        if len(chunk) > room:
            session.over_limit = True
        return True

    def pump(self, session, deadline, done):
        """Move bytes between the harness and ``session`` until ``done()`` or the deadline; False on
        the deadline."""
        while not done():
            if session.over_limit:
                return True
            now = time.monotonic()
            if now >= deadline:
                session.timed_out = True
                return False
            reads = {session.fds[n]: n for n in ("out", "err", "resp") if session.fds.get(n) is not None}
            if not self.runner_gone:
                reads[self.sock.fileno()] = "runner"
            writes = {}
            for name in ("in", "req"):
                if session.fds.get(name) is not None and session.pending[name]:
                    writes[session.fds[name]] = name
            if (
                session.fds.get("in") is not None
                and not session.pending["in"]
                and session.close_stdin_when_sent
            ):
                session.close("in")
            if not reads and not writes:
                return done()
            try:
                readable, writable, _ = select.select(list(reads), list(writes), [], deadline - now)
            except InterruptedError:
                continue
            for fd in readable:
                name = reads[fd]
                if name == "runner":
                    self.on_message(session)
                else:
                    self.read_some(session, name)
            for fd in writable:
                name = writes[fd]
                try:
                    written = os.write(fd, session.pending[name])
                    del session.pending[name][:written]
                except BlockingIOError:
                    pass
                except OSError:  # the reader is gone
                    session.pending[name].clear()
                    session.close(name)
        return True

    # one call to a candidate function -----------------------------------------------------------------
    def call(self, session, deadline, name, args, kwargs, as_json=False):
        """The value ``name(*args, **kwargs)`` returned in the candidate process (plain values only:
        literals, or JSON values when ``as_json``)."""
        try:
            if as_json:
                request = "J" + json.dumps([name, list(args), dict(kwargs)])
            else:
                request = "L" + to_literal_text((name, list(args), dict(kwargs)))
        except (NotLiteral, TypeError, ValueError) as exc:
            raise CandidateFailed(
                "sandbox_error", "the test passed an argument that cannot be sent to the candidate: %s" % exc
            ) from None
        if session.fds.get("req") is None:
            raise CandidateFailed(*session.failure())
        session.pending["req"].extend(frame(request.encode("utf-8", "surrogatepass")))
        try:  # most requests fit the pipe at once: no need to wait for select to say so
            del session.pending["req"][: os.write(session.fds["req"], session.pending["req"])]
        except BlockingIOError:
            pass
        except OSError:  # the candidate process closed its end: the pump below finds out why
            session.pending["req"].clear()
        reply = [None]

        def answered():
            if reply[0] is None:
                reply[0] = session.reply()
            return reply[0] is not None or session.fds.get("resp") is None or session.exited()

        in_time = self.pump(session, deadline, answered)
        if reply[0] is None:
            session.drain()
            reply[0] = session.reply()
        if reply[0] is None:
            if session.over_limit:
                raise CandidateFailed("output_limit", "the reply went past %d bytes" % self.output_bytes)
            if not in_time:
                raise CandidateFailed("timeout", "no answer within %ss" % self.timeout)
            session.finish()
            verdict, detail = session.failure()
            if verdict == "runtime_error" and not session.stderr_text().strip():
                detail = "the candidate process ended without answering the call (%s)" % detail
            raise CandidateFailed(verdict, detail)
        try:
            kind, body = reply[0][:1], reply[0][1:].decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            raise CandidateFailed(
                "runtime_error", "the candidate process sent a reply that is not UTF-8"
            ) from None
        if kind == b"E":
            raise CandidateRaised(body)
        if kind == b"N":
            raise CandidateFailed("wrong_answer", "the returned value cannot be checked: %s" % body)
        if kind != (b"J" if as_json else b"V"):
            raise CandidateFailed("runtime_error", "the candidate process sent a malformed reply to the call")
        if as_json:
            try:
                return json.loads(body)
            except (ValueError, RecursionError) as exc:
                raise CandidateFailed(
                    "runtime_error", "the returned value did not arrive as JSON: %s" % exc
                ) from None
        try:
            return from_literal_text(body)
        except NotLiteral as exc:
            raise CandidateFailed(
                "runtime_error", "the returned value did not arrive as a literal: %s" % exc
            ) from None

    # modes -------------------------------------------------------------------------------------------------
    def run_stdin_test(self, test):
        try:
            session = Session(self, serve=False, stdin_data=str(test["input"]).encode("utf-8"))
        except CandidateFailed as exc:
            return exc.verdict, exc.detail, 0.0
        in_time = self.pump(session, session.started + self.timeout, session.exited)
        elapsed = time.monotonic() - session.started
        session.finish()
        if session.over_limit:
            return "output_limit", "output went past %d bytes" % self.output_bytes, elapsed
        if not in_time:
            return "timeout", "wall-clock limit of %ss reached" % self.timeout, elapsed
        status = session.status
        if status is None or not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
            verdict, detail = session.failure()
            return verdict, detail, elapsed
        stdout = session.out.decode("utf-8", "replace")
        if not stdout_matches(stdout, str(test["output"])):
            return (
                "wrong_answer",
                "got %r, expected %r" % (short(stdout), short(str(test["output"]))),
                elapsed,
            )
        return "passed", "", elapsed

    def run_functional_test(self, test):
        if test.get("bad"):
            return "sandbox_error", test["bad"], 0.0
        try:
            session = Session(self, serve=True, owner="Solution")
        except CandidateFailed as exc:
            return exc.verdict, exc.detail, 0.0
        try:
            value = self.call(
                session, session.started + self.timeout, test["func_name"], test["args"], {}, as_json=True
            )
        except CandidateRaised as exc:
            return "runtime_error", short(str(exc)), time.monotonic() - session.started
        except CandidateFailed as exc:
            return exc.verdict, exc.detail, time.monotonic() - session.started
        finally:
            session.finish()
        elapsed = time.monotonic() - session.started
        got = value  # JSON values, as in SkyRL-gym (tuples arrive as lists)
        if got != test["expected"]:
            return (
                "wrong_answer",
                "got %s, expected %s" % (short(repr(got)), short(repr(test["expected"]))),
                elapsed,
            )
        return "passed", "", elapsed

    def run_tests(self, run_one):
        results = []
        tests = self.payload["tests"]
        budget = self.payload.get("total_timeout")
        deadline = time.monotonic() + float(budget) if budget else None
        for index, test in enumerate(tests):
            if deadline is not None and time.monotonic() >= deadline:
                results.extend(
                    {"index": i, "verdict": "timeout", "wall_time_s": 0.0,
                     "detail": "not run: the tests' time in all (%ss) was spent" % budget}
                    for i in range(index, len(tests))
                )
                break
            verdict, detail, elapsed = run_one(test)
            results.append(
                {"index": index, "verdict": verdict, "detail": detail, "wall_time_s": round(elapsed, 6)}
            )
            if verdict != "passed" and self.payload.get("stop_on_first_failure", True):
                results.extend(
                    {"index": i, "verdict": "not_run", "detail": "", "wall_time_s": 0.0}
                    for i in range(index + 1, len(tests))
                )
                break
        return {"tests": results, "stderr": ""}

    def run_check(self):
        """HumanEval: the problem's prompt (its helpers) and ``check`` run here; ``check`` gets a proxy
        that calls the entry point in the candidate process."""
        import linecache

        entry_point = self.payload["entry_point"]
        try:
            session = Session(self, serve=True)
        except CandidateFailed as exc:
            return {
                "tests": [{"index": 0, "verdict": exc.verdict, "detail": exc.detail, "wall_time_s": 0.0}],
                "stderr": "",
            }
        deadline = session.started + self.timeout
        failures = []

        def candidate(*args, **kwargs):
            if failures:
                raise failures[0]
            try:
                return self.call(session, deadline, entry_point, args, kwargs)
            except CandidateFailed as exc:
                failures.append(exc)
                raise

        namespace = {"__name__": "__check__", "__builtins__": __builtins__}
        verdict, detail, harness_tb = "passed", "", ""
        try:
            for name, source in (
                ("prompt.py", self.payload["prompt"]),
                ("test.py", self.payload["test_code"]),
            ):
                linecache.cache[name] = (len(source), None, source.splitlines(True), name)
                exec(compile(source, name, "exec"), namespace)
                # Test code that names the entry point (HumanEval/33 does) means the candidate's.
                namespace[entry_point] = candidate
            namespace["check"](candidate)
        except CandidateFailed as exc:
            verdict, detail = exc.verdict, exc.detail
        except CandidateRaised as exc:
            verdict, detail = "runtime_error", short(str(exc))
            harness_tb = str(exc)
        except BaseException as exc:
            tb = exc.__traceback__
            while tb is not None and tb.tb_frame.f_code.co_filename not in ("test.py", "prompt.py"):
                tb = tb.tb_next
            harness_tb = "".join(traceback.format_exception(type(exc), exc, tb))
            kind = "wrong_answer" if isinstance(exc, AssertionError) else "runtime_error"
            verdict, detail = (
                kind,
                short(harness_tb.strip().splitlines()[-1] if harness_tb.strip() else repr(exc)),
            )
        if verdict == "passed" and failures:  # test code swallowed a failure: it still fails
            verdict, detail = failures[0].verdict, failures[0].detail
        elapsed = time.monotonic() - session.started
        session.finish()
        stderr = session.stderr_text()
        if harness_tb:
            stderr = (stderr + "\n" if stderr and not stderr.endswith("\n") else stderr) + harness_tb
        result = {"index": 0, "verdict": verdict, "detail": detail, "wall_time_s": round(elapsed, 6)}
        return {"tests": [result], "stderr": stderr[-4000:]}

    def run(self, runner):
        self.start_runner(runner)
        try:
            self.wait_for_runner()
            mode = self.payload["mode"]
            if mode == "tests":
                return self.run_tests(
                    lambda test: (
                        self.run_functional_test if test.get("kind") == "call" else self.run_stdin_test
                    )(test)
                )
            if mode == "check":
                return self.run_check()
            raise ValueError("unknown mode %r" % (mode,))
        finally:
            self.stop_runner()


def spawn_runner(runner):
    """Start the runner: a fresh interpreter (``posix_spawn``, so nothing of this process's memory goes
    with it) holding one end of a socket pair and, on its stdin, its own code (``runner``:
    ``("marshal" | "source", bytes)``); the public job follows on that stdin later. Returns
    ``(pid, our socket end, the stdin's write end)``."""
    kind, code = runner
    ours, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
    job_r, job_w = os.pipe()
    os.set_inheritable(theirs.fileno(), True)
    try:
        pid = os.posix_spawn(
            sys.executable,
            # -S: no site module (it costs more than the rest of the start); the runner takes the
            # harness's import path instead, which has no folder a candidate can write.
            [sys.executable, "-I", "-S", "-c", RUNNER_LOADERS[kind], str(len(code)), str(theirs.fileno())],
            dict(os.environ),
            file_actions=[
                (os.POSIX_SPAWN_DUP2, job_r, 0),
                (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
            ],
            setpgroup=0,
        )
    finally:
        theirs.close()
        os.close(job_r)
    # The code fits the pipe or the runner is reading it: its start overlaps the harness's own work.
    write_all(job_w, code)
    return pid, ours, job_w


def harness_main(runner):
    """The harness's entry point (called by the host's bootstrap program; ``runner`` is the runner's
    code, see :meth:`Harness.start_runner`)."""
    make_undumpable()
    # Only fds 0-2 and those made here may reach the runner: whatever else the sandbox left open
    # stays out of every child process.
    try:
        inherited = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        inherited = list(range(3, 256))
    for fd in inherited:
        if fd > 2:
            try:
                os.set_inheritable(fd, False)
            except OSError:
                pass
    scratch = os.getcwd()
    # Nothing the harness imports from now on may come from a folder a candidate can write.
    writable = tuple(os.path.realpath(p) for p in (scratch, "/tmp", "/sandbox", "/dev/shm", "/var/tmp"))
    sys.path[:] = [p for p in sys.path if p and not any(os.path.realpath(p).startswith(w) for w in writable)]
    import linecache  # noqa: F401

    started_runner = spawn_runner(runner)  # before the secrets are even read
    chunks = []
    while True:
        chunk = os.read(0, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    payload = json.loads(b"".join(chunks).decode("utf-8"))
    nonce = payload.pop("nonce")
    real_stdout = sys.stdout
    sys.stdout = io.StringIO()  # what test code prints is not part of the verdict channel
    try:
        report = Harness(payload).run(started_runner)
    except BaseException as exc:  # only ever a failing report
        report = {
            "error": "the grading harness failed: %s"
            % short("".join(traceback.format_exception_only(type(exc), exc)).strip())
        }
    finally:
        sys.stdout = real_stdout
    write_all(1, (nonce + json.dumps(report) + "\n").encode("utf-8"))
