"""The seccomp filter's program for every architecture it knows, run by a small interpreter of the classic BPF it is
made of: a kernel runs only its own machine's filter, so the aarch64 program's decisions are checked here on any
machine. The program of the machine the tests run on also runs for real, in a sandbox, in ``test_escapes.py``'s
probes."""

from __future__ import annotations

import errno
import struct

import pytest

from skygym_sandboxes.supervisor import (
    AUDIT_ARCH,
    DENIED_SYSCALLS,
    SELF_ONLY_SYSCALLS,
    SYSCALL_NUMBERS,
    seccomp_program,
)
from tests.sandboxes.support import KERNEL_SYSCALLS

ALLOW, KILL = "allow", "kill"
ORDINARY = ("read", "openat", "getpid", "execve", "mmap", "sched_getaffinity")  # the filter must let these through
CLONE_NEWUSER, SIGCHLD = 0x10000000, 17
AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, AF_PACKET, AF_VSOCK = 1, 2, 10, 16, 17, 40


def decide(program: bytes, arch: int, nr: int, *args: int) -> str:
    """What the filter returns for a call: ``"allow"``, an errno's name, or ``"kill"``. Reads the ``seccomp_data``
    record as the kernel lays it out (nr, arch, instruction pointer, six 64-bit arguments)."""
    # both machines are little-endian: the low half of an argument is at 16 + 8n on any host the tests run on
    data = struct.pack("<iIQ6Q", nr, arch, 0, *(list(args) + [0] * (6 - len(args))))
    records = [struct.unpack("<HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]
    accumulator, pc = 0, 0
    while True:
        code, jt, jf, k = records[pc]
        if code == 0x20:  # BPF_LD | BPF_W | BPF_ABS: 32 bits of seccomp_data
            accumulator = struct.unpack_from("=I", data, k)[0]
            pc += 1
        elif code in (0x15, 0x35, 0x45):  # BPF_JMP | BPF_JEQ / BPF_JGE / BPF_JSET | BPF_K
            taken = {0x15: accumulator == k, 0x35: accumulator >= k, 0x45: bool(accumulator & k)}[code]
            pc += 1 + (jt if taken else jf)
        elif code == 0x06:  # BPF_RET | BPF_K
            if k == 0x7FFF0000:
                return ALLOW
            if k & 0xFFFF0000 == 0x00050000:  # SECCOMP_RET_ERRNO
                return errno.errorcode[k & 0xFFFF]
            return KILL
        else:
            raise AssertionError(f"instruction {pc} has an opcode the interpreter does not know: {code:#x}")


@pytest.mark.parametrize("machine", sorted(SYSCALL_NUMBERS))
def test_the_filter_decides_the_same_on_every_architecture(machine):
    program, nr, arch = seccomp_program(machine), SYSCALL_NUMBERS[machine], AUDIT_ARCH[machine]

    def call(name, *args):
        return decide(program, arch, nr[name], *args)

    for name in DENIED_SYSCALLS:
        if name in nr:
            assert call(name) == "EPERM", name
    for name in ORDINARY:
        assert decide(program, arch, KERNEL_SYSCALLS[machine][name]) == ALLOW, name
    assert call("clone", SIGCHLD) == ALLOW and call("clone", CLONE_NEWUSER | SIGCHLD) == "EPERM"
    assert call("clone3") == "ENOSYS"  # libc falls back to clone, whose flags the filter can read
    for family in (AF_UNIX, AF_INET, AF_INET6):
        assert call("socket", family) == call("socketpair", family) == ALLOW
    for family in (AF_NETLINK, AF_PACKET, AF_VSOCK):
        assert call("socket", family) == call("socketpair", family) == "EAFNOSUPPORT"
    for name in SELF_ONLY_SYSCALLS:
        assert call(name, 0) == ALLOW and call(name, 4242) == "EPERM", name
    assert call("prlimit64", 0, 7, 0x1000) == ALLOW  # set its own
    assert call("prlimit64", 4242, 7, 0, 0x1000) == ALLOW  # read another's
    assert call("prlimit64", 4242, 7, 0x1000) == "EPERM"  # set another's
    assert call("setpriority", 0, 0, 19) == ALLOW and call("setpriority", 0, 4242, 19) == "EPERM"
    assert call("setpriority", 2, 0, 19) == "EPERM"  # PRIO_USER
    assert call("ioprio_set", 1, 0, 3 << 13) == ALLOW and call("ioprio_set", 1, 4242, 3 << 13) == "EPERM"
    assert call("setsockopt", 3, 1, 26) == "EPERM" and call("setsockopt", 3, 1, 7) == ALLOW  # BPF; SO_SNDBUF
    assert call("prctl", 22, 2) == "EPERM" and call("prctl", 15) == ALLOW  # PR_SET_SECCOMP; PR_SET_NAME
    for other in set(AUDIT_ARCH.values()) - {arch} | {0x40000003}:  # another machine's calls, 32-bit x86's
        assert decide(program, other, KERNEL_SYSCALLS[machine]["read"]) == "EPERM"


def test_x86_64s_x32_calls_are_refused():
    program = seccomp_program("x86_64")
    assert decide(program, AUDIT_ARCH["x86_64"], 0x40000000 | 0) == "EPERM"  # x32's read


def test_the_filters_numbers_are_the_kernels():
    """A number typed wrong would deny an ordinary call, or let a dangerous one through: the filter's table is
    compared with the kernel's numbers written out apart from it (``tests/sandboxes/support.py``)."""
    x86, arm = SYSCALL_NUMBERS["x86_64"], SYSCALL_NUMBERS["aarch64"]
    assert set(x86) - set(arm) == {"iopl", "ioperm"} and set(arm) <= set(x86)  # aarch64 has no iopl or ioperm
    assert set(DENIED_SYSCALLS) | set(SELF_ONLY_SYSCALLS) <= set(x86)
    for machine, table in SYSCALL_NUMBERS.items():
        assert table == {name: KERNEL_SYSCALLS[machine][name] for name in table}, machine


def test_an_architecture_without_numbers_gets_no_filter():
    assert seccomp_program("riscv64") is None
