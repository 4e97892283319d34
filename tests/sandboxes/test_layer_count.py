"""How the container watcher counts the files of a container's layer (``_entries``), on folders of this machine:
the Docker tests count real layers (test_container_disk.py)."""

from __future__ import annotations

import os

from skygym_sandboxes.containers import DEEPEST_LAYER_FOLDER, HIDDEN_FILES, _entries


def _descend(top: str, names: list) -> int:
    """Make ``names`` nested below ``top`` one folder at a time, each opened by descriptor; the deepest's fd."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for name in names:
        os.mkdir(name, dir_fd=fd)
        child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    return fd


def test_files_below_a_path_too_long_to_walk_are_counted(tmp_path):
    """20 folders of 250-character names: the path to the files passes PATH_MAX, and a walk by path lost them."""
    fd = _descend(str(tmp_path), ["d" * 250] * 20)
    try:
        for i in range(300):
            os.close(os.open(f"f{i}", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
    finally:
        os.close(fd)
    assert _entries(str(tmp_path)) == 20 + 300


def test_a_tree_deeper_than_any_project_counts_as_hiding_files(tmp_path):
    os.close(_descend(str(tmp_path), ["a"] * (DEEPEST_LAYER_FOLDER + 1)))
    assert _entries(str(tmp_path)) == HIDDEN_FILES
    shallow = tmp_path.parent / (tmp_path.name + "-shallow")
    shallow.mkdir()
    os.close(_descend(str(shallow), ["a"] * 40))
    (shallow / "link").symlink_to("/")  # links are not followed
    assert _entries(str(shallow)) == 41
