"""The supervisor's cleanup on its own: it empties any tree (depth, permissions, links, FIFOs) without
following a link out of it, and gives up (so the worker is retired) rather than run past its budget."""

from __future__ import annotations

import os
import time

import pytest

from skygym_sandboxes.supervisor import WipeFailed, empty_directory, open_beneath


def test_any_tree_is_emptied_and_no_link_is_followed(tmp_path):
    root = tmp_path / "sandbox"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("host file")
    root.mkdir()
    fd = os.open(str(root), os.O_RDONLY)  # 3000 levels: deeper than PATH_MAX allows by name
    for _ in range(3000):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.symlink(str(outside), "link-out", dir_fd=fd)
    os.close(fd)
    os.symlink(str(outside), str(root / "top-link"))
    os.mkfifo(str(root / "fifo"))
    locked = root / "locked"
    locked.mkdir()
    (locked / "inner").write_text("x")
    locked.chmod(0)
    os.chmod(str(root), 0)
    empty_directory(str(root), time.monotonic() + 30, 10**6)
    assert os.listdir(str(root)) == []
    assert (outside / "keep.txt").read_text() == "host file"


def test_a_tree_past_the_budget_fails_instead_of_running_on(tmp_path):
    for index in range(200):
        (tmp_path / f"f{index}").write_text("x")
    with pytest.raises(WipeFailed, match="budget"):
        empty_directory(str(tmp_path), time.monotonic() + 30, 50)


def test_paths_are_opened_beneath_the_root_without_links(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "f.txt").write_text("inside")
    os.symlink("/etc", str(tmp_path / "up"))
    os.symlink("/etc/passwd", str(tmp_path / "real" / "link.txt"))
    root = os.open(str(tmp_path), os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd = open_beneath(root, ["real", "f.txt"], os.O_RDONLY)
        assert os.read(fd, 100) == b"inside"
        os.close(fd)
        for parts in (["up", "passwd"], ["real", "link.txt"]):
            with pytest.raises(OSError):
                open_beneath(root, parts, os.O_RDONLY)
    finally:
        os.close(root)


def test_a_root_loses_what_a_program_set_and_keeps_the_systems_labels():
    """After a wipe a root gets its first mode back and loses the attributes its owner (the program) can set; a
    security.* attribute (an SELinux label on every tmpfs of such a host) is the system's and stays: removing it
    needs CAP_SYS_ADMIN, and trying it would have stopped every worker there from starting (a review)."""
    import tempfile

    from skygym_sandboxes.supervisor import restore_root

    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as root:
        os.chmod(root, 0o2777)
        try:
            os.setxattr(root, "user.note", b"from an earlier run")
        except OSError as exc:
            pytest.skip(f"this file system keeps no user.* attributes ({exc}): run on a tmpfs that does")
        try:
            os.setxattr(root, "security.probe", b"label")
        except OSError:
            labelled = False  # setting security.* needs CAP_SYS_ADMIN: the rest is still checked
        else:
            labelled = True
        from skygym_sandboxes.supervisor import inode_flags

        first = inode_flags(root)
        if first is not None:
            inode_flags(root, first | 0x80)  # chattr +A: no atime for every file made in it (an attacker's pass)
        restore_root(root, 0o700, first)
        assert inode_flags(root) == first
        assert oct(os.stat(root).st_mode & 0o7777) == oct(0o700)
        assert "user.note" not in os.listxattr(root)
        assert ("security.probe" in os.listxattr(root)) is labelled
