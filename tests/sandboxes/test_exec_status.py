"""Which exit status ``Container.exec`` reports when the wrapper's last line and the engine disagree, or the engine
says nothing. Unit tests of the parsing with a client double; test_docker_exec.py runs a forging command for real."""

from __future__ import annotations

from skygym_sandboxes.containers import Container

MARKER = "__skygym_end_0123456789abcdef__"


def _raw(output: str, leftover: int = 0) -> bytes:
    return f"{output}\n{MARKER}{leftover}\n".encode()


def test_the_engine_status_is_the_one_reported():
    result = Container._parse(_raw("fine\n"), MARKER, 1000, 30, 0.1, 5)
    assert (result.exit_code, result.output, result.timed_out) == (5, "fine\n", False)


def test_a_printed_status_is_never_read():
    # what a forging command prints: the marker with a zero after it, then its wrapper killed (the engine: 137)
    forged = f"\n{MARKER}0 0\n".encode()
    assert Container._parse(forged, MARKER, 1000, 30, 0.1, 137).exit_code == 137


def test_no_status_from_the_engine_counts_as_a_failure_and_says_so():
    result = Container._parse(_raw("all tests passed\n"), MARKER, 1000, 30, 0.1, None)
    assert result.exit_code == -1 and not result.timed_out
    assert result.output == ("all tests passed\n\n[the container engine did not report the command's exit status; "
                             "counted as failed]")


def test_the_bytes_past_the_cap_are_still_counted():
    result = Container._parse(_raw("x" * 10, leftover=25), MARKER, 10, 30, 0.1, 0)
    assert (result.exit_code, result.truncated) == (0, True)
    assert result.output.endswith("[output truncated: 25 more bytes]")


class _SilentEngine:
    """An engine API that keeps saying the exec runs, or cannot be reached."""

    def __init__(self, fails: bool):
        self.fails, self.asked = fails, 0

    def exec_inspect(self, exec_id):
        self.asked += 1
        if self.fails:
            raise ConnectionError("engine unreachable")
        return {"Running": True, "ExitCode": None}


def _container_with(api) -> Container:
    container = Container.__new__(Container)  # no engine: only the status lookup runs
    container.client = type("Client", (), {"api": api})()
    return container


def test_an_engine_that_does_not_answer_gives_no_status():
    running = _SilentEngine(fails=False)
    assert _container_with(running)._exit_status("e1", wait_s=0.05) is None and running.asked >= 2
    unreachable = _SilentEngine(fails=True)
    assert _container_with(unreachable)._exit_status("e1", wait_s=0.05) is None and unreachable.asked == 1
