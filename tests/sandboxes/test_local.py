"""The ``Sandbox`` API on the local backend: requests, results, limits, async and batch calls."""

from __future__ import annotations

import os
import shutil
import warnings

import pytest

from skygym_sandboxes import (
    Limits,
    RunRequest,
    RunResult,
    Sandbox,
    Status,
    get_sandbox,
    run_python,
    sandbox_from_config,
)
from skygym_sandboxes.local import LocalSandbox

needs_bwrap = pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap (bwrap) is not installed")


@pytest.fixture(scope="module")
def box():
    if not shutil.which("bwrap"):
        pytest.skip("bubblewrap (bwrap) is not installed")
    sandbox = get_sandbox("local", pool_size=2, limits={"wall_s": 5, "cpu_s": 5})
    assert sandbox.wait_ready(60)
    yield sandbox
    sandbox.close()


def test_a_local_sandbox_is_a_sandbox(box):
    assert isinstance(box, Sandbox)
    assert box.name == "local-bwrap-warm"


def test_stdin_stdout_and_timings(box):
    result = box.run(RunRequest(code="name = input()\nprint(f'hello {name}')", stdin="world\n"))
    assert result.status == Status.OK and result.ok
    assert result.stdout == "hello world\n" and result.stderr == ""
    assert result.exit_code == 0 and result.wall_time_s > 0 and result.cpu_time_s >= 0


def test_files_argv_and_imports_from_scratch(box):
    request = RunRequest(
        code="import sys, helper\nprint(helper.double(int(open('data/n.txt').read())), sys.argv[1:])",
        files={"helper.py": "def double(x):\n    return 2 * x\n", "data/n.txt": b"21"},
        argv=["--flag"],
    )
    result = box.run(request)
    assert result.stdout == "42 ['--flag']\n", result


def test_exceptions_and_exit_codes(box):
    failed = box.run("raise ValueError('bad input')")
    assert failed.status == Status.ERROR and failed.exit_code == 1
    assert "ValueError: bad input" in failed.stderr and 'main.py", line 1' in failed.stderr
    assert box.run("import sys; sys.exit(7)").exit_code == 7
    assert box.run("import sys; sys.exit('message')").stderr == "message\n"
    syntax = box.run("def f(:\n  pass")
    assert syntax.status == Status.ERROR and "SyntaxError" in syntax.stderr


def test_command_lines_run_too(box):
    result = box.run(
        RunRequest(command=["sh", "-c", "read x; echo got $x; echo oops >&2; exit 4"], stdin="1\n")
    )
    assert (result.status, result.exit_code, result.stdout, result.stderr) == (
        Status.ERROR,
        4,
        "got 1\n",
        "oops\n",
    )
    missing = box.run(RunRequest(command=["no-such-program"]))
    assert missing.exit_code == 127 and "no-such-program" in missing.stderr


def test_per_request_limits_override_the_sandbox_limits(box):
    result = box.run(RunRequest(code="import time\ntime.sleep(5)", limits=Limits(wall_s=0.5)))
    assert result.status == Status.TIMEOUT and result.wall_time_s < 2
    cut = box.run(RunRequest(code="print('z' * 5000)", limits={"output_bytes": 100}))
    assert cut.status == Status.OUTPUT_LIMIT and cut.stdout == "z" * 100 and cut.stdout_truncated


def test_runs_do_not_see_each_others_files_or_processes(box):
    writer = box.run("open('secret.txt', 'w').write('mine')\nopen('/tmp/also', 'w').write('x')\nprint('ok')")
    assert writer.ok
    readers = box.run_batch(
        ["import os\nprint(sorted(os.listdir('.')), os.listdir('/tmp'))"] * 4, concurrency=2
    )
    assert all(r.stdout == "['main.py'] []\n" for r in readers), readers
    # Two programs running at once: each sees only its own processes.
    code = "import os, time\ntime.sleep(0.3)\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()) == [1, os.getpid()])"
    first, second = box.run_batch([code, code], concurrency=2)
    assert first.stdout == second.stdout == "True\n", (first, second)  # only the supervisor and itself


def test_random_state_differs_between_runs_of_a_warm_worker(box):
    values = {box.run("import random\nprint(random.random())").stdout for _ in range(4)}
    assert len(values) == 4


async def test_async_calls_and_async_batches(box):
    result = await box.arun("print('async')")
    assert result.stdout == "async\n"
    # Each program reports when it ran; with concurrency 2, some of them must have run at the same time.
    code = "import time\nstart = time.time()\ntime.sleep(0.5)\nprint(start, time.time())"
    results = await box.arun_batch([code] * 4, concurrency=2)
    spans = sorted(tuple(map(float, r.stdout.split())) for r in results)
    assert len(spans) == 4 and all(r.ok for r in results)
    assert any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:])), spans


def test_run_python_convenience(box):
    result = run_python("print(int(input()) + 1)", stdin="41", timeout=3, sandbox=box)
    assert result.stdout == "42\n" and result.ok


def test_results_round_trip_through_dicts(box):
    result = box.run("print('x')")
    again = RunResult.from_dict(result.to_dict())
    assert again == result and result.to_dict()["status"] == "ok"


def test_bad_requests_raise_clear_errors():
    with pytest.raises(ValueError, match="exactly one of `code`"):
        RunRequest()
    with pytest.raises(TypeError, match="list of strings"):
        RunRequest(command="echo hi")
    with pytest.raises(ValueError, match="relative path"):
        RunRequest(code="", files={"../x": "y"})
    with pytest.raises(ValueError, match="wall_s"):
        Limits(wall_s=-1)
    with pytest.raises(ValueError, match="unknown limit"):
        Limits.from_dict({"walltime": 3})
    with pytest.raises(ValueError, match="unknown sandbox backend 'cloud'"):
        get_sandbox("cloud")
    with pytest.raises(TypeError, match="bad option for the 'local' sandbox backend"):
        get_sandbox("local", pool_sizes=3)


def test_no_isolation_only_when_asked_and_with_a_warning():
    with pytest.warns(RuntimeWarning, match="WITHOUT any isolation"):
        unsafe = LocalSandbox(isolation="none", warm=False, limits={"wall_s": 5})
    try:
        result = unsafe.run("import os\nprint(os.getcwd().startswith('/tmp/sandbox-none-'))")
        assert result.stdout == "True\n", result
        # Even without namespaces, a daemonised grandchild does not outlive the run.
        daemon = unsafe.run(
            "import os, time\nif os.fork() == 0:\n    os.setsid()\n    pid = os.fork()\n    if pid == 0:\n"
            "        time.sleep(60)\n    print(pid, flush=True)\n    os._exit(0)\ntime.sleep(0.2)\n"
        )
        grandchild = int(daemon.stdout)
        with pytest.raises(ProcessLookupError):
            os.kill(grandchild, 0)
    finally:
        unsafe.close()
    with pytest.raises(ValueError, match="isolation must be one of"):
        LocalSandbox(isolation="off")


@needs_bwrap
def test_config_mapping_builds_a_cold_sandbox():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the safe default never warns
        cold = sandbox_from_config({"backend": "local", "warm": False, "limits": {"wall_s": 5}})
    try:
        assert cold.name == "local-bwrap" and cold.limits.wall_s == 5
        assert cold.run("print(2 + 2)").stdout == "4\n"
    finally:
        cold.close()


def test_a_closed_sandbox_returns_a_sandbox_error():
    if not shutil.which("bwrap"):
        pytest.skip("bubblewrap (bwrap) is not installed")
    sandbox = LocalSandbox(pool_size=1)
    sandbox.close()
    result = sandbox.run("print(1)")
    assert result.status == Status.SANDBOX_ERROR and "closed" in result.message


@pytest.mark.timeout(60)  # a hang guard: before, the batch ended only when every run reached its wall limit
def test_ctrl_c_during_a_batch_abandons_its_runs_at_once():
    """Ctrl-C in run_batch waited for each running program to reach its wall limit (56 s for three 60 s sleeps,
    a resource audit): the runs under way are now abandoned, their workers torn down, and no new one starts."""
    import signal
    import threading
    import time

    if not shutil.which("bwrap"):
        pytest.skip("bubblewrap (bwrap) is not installed")
    sandbox = get_sandbox("local", pool_size=2, limits={"wall_s": 120, "cpu_s": 120})
    try:
        assert sandbox.wait_ready(60)
        main = threading.main_thread().ident  # Ctrl-C: SIGINT to the main thread, as a terminal sends it
        threading.Timer(2.0, signal.pthread_kill, (main, signal.SIGINT)).start()
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            sandbox.run_batch(["import time; time.sleep(100)"] * 4, concurrency=2)
        assert time.monotonic() - started < 50, "the batch waited for its runs' wall limits"
        again = run_python("print(6 * 7)", sandbox=sandbox)  # the pool serves on, with workers in place of the torn ones
        assert again.ok and again.stdout == "42\n", again
    finally:
        sandbox.close()


def test_an_unisolated_workers_programs_die_with_the_process_that_ran_them(tmp_path):
    """isolation="none" has no namespace that dies with its caller: a killed caller left the supervisors, their
    programs (with no wall limit any more) and their folders behind (a resource audit). Its supervisors and their
    programs now die with it, and the next process to start a worker removes the folders of one that is gone."""
    import subprocess
    import sys
    import tempfile
    import time

    from skygym_sandboxes.workers import pid_alive

    pids = tmp_path / "pids"
    pids.mkdir()
    program = f"import os, time; open({str(pids)!r} + '/' + str(os.getpid()), 'w').close(); time.sleep(60)"
    caller = (f"import warnings; warnings.simplefilter('ignore'); from skygym_sandboxes import get_sandbox; "
              f"box = get_sandbox('local', isolation='none', pool_size=2, limits={{'wall_s': 60}}); "
              f"box.run_batch([{program!r}] * 2, concurrency=2)")
    process = subprocess.Popen([sys.executable, "-c", caller], env={**os.environ, "TMPDIR": str(tmp_path)})
    deadline = time.monotonic() + 60
    while len(list(pids.iterdir())) < 2:
        assert time.monotonic() < deadline and process.poll() is None, "the programs never started"
        time.sleep(0.1)
    process.kill()
    process.wait()
    running = [int(p.name) for p in pids.iterdir()]
    deadline = time.monotonic() + 20
    while any(pid_alive(pid) for pid in running) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in running if pid_alive(pid)]
    left = list(tmp_path.glob(f"sandbox-none-{process.pid}-*"))
    assert left  # its workers' cleanup never ran: the next process to start a worker removes them
    original = tempfile.tempdir
    tempfile.tempdir = str(tmp_path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            box = get_sandbox("local", isolation="none", pool_size=1, limits={"wall_s": 5})
        box.close()
    finally:
        tempfile.tempdir = original
    assert not [p for p in left if p.exists()]


def test_a_folder_named_for_a_pid_past_any_int_or_owned_by_another_user_does_not_stop_the_sweep(tmp_path):
    """The sweep read the pid from a folder's name: `mkdir /tmp/sandbox-none-99999999999-x` by any user made
    os.kill raise OverflowError, and every unisolated worker start failed (a review). Only this user's folders of
    processes that are gone are removed."""
    from skygym_sandboxes.workers import folders_of_gone_processes

    huge, digits, mine = (tmp_path / f"sandbox-none-{name}-x" for name in ("99999999999999999999", "\u00b2", "12"))
    running = tmp_path / f"sandbox-none-{os.getpid()}-x"
    for folder in (huge, digits, mine, running):
        folder.mkdir()
    theirs = tmp_path / "sandbox-none-99999999999999999998-x"
    if os.geteuid() == 0:  # another user's folder: only root can make one here
        theirs.mkdir()
        os.chown(theirs, 65534, 65534)
    gone = sorted(folders_of_gone_processes(tmp_path, "sandbox-none-"))
    assert str(huge) in gone and str(running) not in gone and str(digits) not in gone and str(theirs) not in gone


def test_a_backend_whose_run_takes_no_cancel_still_runs_batches():
    """run_batch passes a cancel event to every run; a backend written before (``_run(request, limits)``) got a
    TypeError on each (a review)."""
    from skygym_sandboxes.protocol import BaseSandbox
    from skygym_sandboxes.types import Limits, RunResult, Status

    class Echo(BaseSandbox):
        name = "echo"

        def _run(self, request, limits):
            return RunResult(status=Status.OK, stdout=request.code, stderr="", exit_code=0)

    with Echo(Limits(wall_s=5)) as echo:
        assert [r.stdout for r in echo.run_batch(["a", "b", "c"], concurrency=2)] == ["a", "b", "c"]
