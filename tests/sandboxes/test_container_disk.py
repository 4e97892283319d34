"""A container may not fill the machine's disk: no file past ``ContainerLimits.disk_mb``, and a container that
writes more than that in all is removed (where the engine cannot cap its layer itself: overlay2 on ext4, as
here), its owner told why. Against the real Docker engine the tests start."""

from __future__ import annotations

import pytest

from skygym_sandboxes.containers import Container, ContainerLimits, _DiskWatch, docker_client

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_no_file_grows_past_the_cap_and_a_container_that_writes_more_is_removed(docker_engine, monkeypatch):
    client = docker_client(docker_engine.base_url)
    check = _DiskWatch.check
    monkeypatch.setattr(_DiskWatch, "check", classmethod(lambda cls: []))  # the watcher waits its turn
    with Container(docker_engine.image, client=client, limits=ContainerLimits(disk_mb=64)) as box:
        big = box.exec("head -c 100000000 /dev/zero > /big; echo status=$?; wc -c < /big; rm /big",
                       timeout_s=30)
        status, size = big.output.split("status=")[1].split()
        assert status != "0" and int(size) <= 64 * 2**20, big.output  # SIGXFSZ, or no space left
        many = box.exec("for i in 1 2 3 4; do head -c 30000000 /dev/zero > /part$i || exit 1; done",
                        timeout_s=60)
        if box.disk_quota:  # the engine caps the layer itself: the writes fail, the container stays
            assert not many.ok and box.disk_used_mb() <= 64
            return
        assert many.ok and box.disk_used_mb() > 100  # each file was allowed, not their sum
        assert check() == [box]
        assert box.id is None and box.gone_why.startswith("it wrote ")
        assert "more than the 64 MB it may" in box.gone_why
        with pytest.raises(RuntimeError, match="the container is closed"):
            box.exec("echo alive")
    assert client.containers.list(all=True, filters={"name": box.name}) == []


def test_the_watcher_removes_a_container_while_its_command_writes(docker_engine, monkeypatch):
    monkeypatch.setattr(_DiskWatch, "interval_s", 0.5)
    client = docker_client(docker_engine.base_url)
    with Container(docker_engine.image, client=client, limits=ContainerLimits(disk_mb=64)) as box:
        if box.disk_quota:
            pytest.skip("this Docker engine caps a container's disk itself (storage-opt size)")
        done = box.exec("for i in 1 2 3 4; do head -c 30000000 /dev/zero > /part$i; done; sleep 30",
                        timeout_s=60)
        assert box.id is None and "the container was removed" in done.output, done.output
        assert done.duration_s < 20, "the watcher polls every few seconds; the command did not run to its end"


def test_an_engine_that_cannot_cap_the_disk_is_asked_once(docker_engine, caplog):
    client = docker_client(docker_engine.base_url)
    boxes = [Container(docker_engine.image, client=client) for _ in range(2)]
    try:
        if all(box.disk_quota for box in boxes):
            pytest.skip("this Docker engine caps a container's disk itself (storage-opt size)")
        assert [box.disk_quota for box in boxes] == [False, False]
        assert sum("cannot cap a container's disk" in record.getMessage() for record in caplog.records) <= 1
        assert boxes[1].exec("echo ok").output.strip() == "ok"
    finally:
        for box in boxes:
            box.close()


def test_when_inodes_run_short_the_container_that_made_the_most_files_is_removed(docker_engine):
    """No engine caps a container's inodes: 200,000 empty files took 10 s and 0 MB of its disk. Where the engine's
    disk is this machine's and few of its inodes are left (here: a reserve of all of them, so any count is short),
    the watcher removes the container whose layer holds the most files, and only that one."""
    client = docker_client(docker_engine.base_url)
    with Container(docker_engine.image, client=client) as quiet, Container(docker_engine.image, client=client) as busy:
        if busy.upper_dir is None:
            pytest.skip("the engine's disk is not readable from this process (another machine's engine, or not "
                        "root): the inode watch cannot count a container's files here")
        made = busy.exec("mkdir /many && cd /many && seq 1 5000 | xargs touch && ls | wc -l", timeout_s=60)
        assert made.output.strip() == "5000", made.output
        pair = [quiet, busy]  # not the containers other tests may hold open in this process
        assert _DiskWatch.check(inode_reserve=0.0, among=pair) == []  # inodes are not short: nothing is removed
        assert _DiskWatch.check(inode_reserve=1.0, among=pair) == [busy]
        assert busy.id is None and busy.gone_why.startswith("it made ")
        assert int(busy.gone_why.split()[2]) >= 5000 and "inodes left" in busy.gone_why
        assert quiet.id is not None and quiet.exec("echo alive").output.strip() == "alive"


def test_what_the_keep_alive_process_prints_is_not_logged_by_the_engine(docker_engine):
    """PID 1's output went to the engine's JSON log, outside the container's layer and every limit: 100 MB written
    to /proc/1/fd/1 made a 573 MB log file in 1.5 s (an attacker's pass). The containers keep no log."""
    client = docker_client(docker_engine.base_url)
    with Container(docker_engine.image, client=client) as box:
        written = box.exec("head -c 10000000 /dev/zero > /proc/1/fd/1; echo rc=$?", timeout_s=60)
        assert "rc=" in written.output
        inspected = client.api.inspect_container(box.id)
        assert inspected["HostConfig"]["LogConfig"]["Type"] == "none"
        assert not inspected.get("LogPath")  # no log file on the engine's disk


def test_files_held_open_after_they_were_deleted_count_against_their_container(docker_engine):
    """A deleted file a process holds open keeps its inode, and no walk of the layer finds it."""
    client = docker_client(docker_engine.base_url)
    with Container(docker_engine.image, client=client) as quiet, Container(docker_engine.image, client=client) as holder:
        if holder.upper_dir is None:
            pytest.skip("the engine's disk is not readable from this process (another machine's engine, or not "
                        "root): the inode watch cannot count a container's files here")
        quiet.exec("mkdir /some && cd /some && seq 1 300 | xargs touch")
        hold = ("import os, time\nfds = []\nfor i in range(3000):\n    name = f'/h{i}'\n"
                "    fds.append(os.open(name, os.O_CREAT | os.O_WRONLY))\n    os.unlink(name)\n"
                "open('/ready', 'w').close()\ntime.sleep(1000)\n")
        holder.write_file("/hold.py", hold.encode())
        holder.exec("ulimit -n 4096; (setsid python3 /hold.py > /dev/null 2>&1 &); "
                    "for i in $(seq 100); do [ -e /ready ] && break; sleep 0.1; done; ls / | grep -c '^h[0-9]'")
        assert _DiskWatch.check(inode_reserve=1.0, among=[quiet, holder]) == [holder]
        assert int(holder.gone_why.split()[2]) >= 3000 and quiet.id is not None
