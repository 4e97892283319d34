"""The unshare fallback (root only): its supervisor builds a minimal read-only root and pivots into
it, so a program sees /usr, a few /etc files, a minimal /dev and its own /sandbox, and nothing else
of the host: no host files, no host unix socket, no mount missed because of an odd path."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import pytest

from skygym_sandboxes import RunRequest, Status
from skygym_sandboxes.local import LocalSandbox
from tests.sandboxes.support import TEST_LIMITS

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("unshare"),
        reason="the unshare fallback needs root and util-linux unshare (run the tests as root)",
    ),
]


def test_only_the_minimal_root_is_visible():
    with LocalSandbox(limits=TEST_LIMITS, isolation="unshare", warm=False) as box:
        result = box.run(
            "import os\nprint(sorted(os.listdir('/')))\nprint(sorted(os.listdir('/dev')))\n"
            "print(os.path.exists('/root'), os.path.exists('/home'), os.path.exists('/run'), os.path.exists('/var'))"
        )
    assert result.status == Status.OK, result
    top, dev, hidden = result.stdout.splitlines()
    assert set(eval(top)) <= {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "proc", "dev", "sandbox", "tmp"}
    assert eval(dev) == sorted(["null", "zero", "full", "random", "urandom", "fd", "stdin", "stdout", "stderr", "shm"])
    assert hidden == "False False False False"


def test_a_mount_whose_path_has_a_space_is_read_only_too():
    """/proc/self/mountinfo writes a space as \\040: the read-only remount must still find the mount."""
    base = tempfile.mkdtemp(prefix="skygym-mount-", dir="/var/tmp")
    os.chmod(base, 0o755)
    odd = os.path.join(base, "with space\tand tab")
    os.makedirs(odd)
    # World-writable: only a read-only mount can stop the program from writing there.
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=777", "tmpfs", odd], check=True)
    try:
        with LocalSandbox(limits=TEST_LIMITS, isolation="unshare", warm=False, ro_binds=[base]) as box:
            result = box.run(
                RunRequest(
                    code=(
                        "import os, sys\n"
                        "path = os.path.join(sys.argv[1], 'planted')\n"
                        "try:\n    open(path, 'w').write('x')\n    print('wrote')\n"
                        "except OSError as exc:\n    print('refused', exc.strerror)\n"
                        "print(os.statvfs(sys.argv[1]).f_flag & os.ST_RDONLY == os.ST_RDONLY)\n"
                    ),
                    argv=[odd],
                )
            )
        assert result.status == Status.OK, result
        assert result.stdout.startswith("refused") and result.stdout.endswith("True\n"), result.stdout
        assert not os.path.exists(os.path.join(odd, "planted"))
    finally:
        subprocess.run(["umount", odd], check=False)
        shutil.rmtree(base, ignore_errors=True)
