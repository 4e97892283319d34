"""The three servers' commands on a port they cannot have: one line naming it and exit 2, before anything is built,
not a bind traceback (a second server started on the same port is the common case)."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from skygym_sandboxes.listening import check_can_listen
from tests.tool_env_support import write_corpus

COMMANDS = {
    "serve-env": [sys.executable, "-m", "skyrl_gym.cli", "serve-env"],
    "serve-retriever": [sys.executable, "-m", "skyrl_gym.cli", "serve-retriever", "--corpus", "{corpus}"],
    "sandboxes": [sys.executable, "-m", "skygym_sandboxes.cli", "serve", "--backend", "local"],
}


@pytest.fixture
def taken_port():
    """A port another server listens on."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        yield server.getsockname()[1]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_port_in_use_or_out_of_range_is_one_line_and_exit_2(command, taken_port, tmp_path):
    pytest.importorskip("uvicorn", reason="the servers need the 'env-service' or 'search' extra: "
                        "pip install 'skyrl-gym[env-service,search]'")
    argv = [part.format(corpus=write_corpus(tmp_path / "corpus.jsonl")) for part in COMMANDS[command]]
    for port, said in ((taken_port, f"cannot listen on 127.0.0.1:{taken_port}: the address is in use"),
                       (99999, "a port is a number from 0 (a free one) to 65535, got 99999")):
        done = subprocess.run([*argv, "--port", str(port)], capture_output=True, text=True, timeout=120)
        last = done.stderr.strip().splitlines()[-1]  # argparse's usage comes before its error line
        assert done.returncode == 2 and said in last and "Traceback" not in done.stderr, done.stderr
        assert "index" not in done.stdout.lower()  # the retriever said so before building its index


def test_a_free_port_and_port_0_pass_and_leave_nothing_listening():
    with socket.socket() as finder:
        finder.bind(("127.0.0.1", 0))
        free = finder.getsockname()[1]
    check_can_listen("127.0.0.1", free)
    check_can_listen("127.0.0.1", 0)
    with socket.socket() as again:  # the probe let it go
        again.bind(("127.0.0.1", free))
    with pytest.raises(ValueError, match="--host no-such-host.invalid: not an address"):
        check_can_listen("no-such-host.invalid", free)
