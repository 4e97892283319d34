"""Closing a container returns once it is gone, whichever thread asks: a run cut short (Ctrl-C) closes every
container its task still holds while a cancelled trajectory's thread may be removing one of them. Against the
real Docker engine the tests start."""

from __future__ import annotations

import threading
import time

import pytest

from skygym_sandboxes.containers import Container, docker_client

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_a_second_close_waits_for_the_first_to_remove_the_container(docker_engine):
    client = docker_client(docker_engine.base_url)
    box = Container(docker_engine.image, client=client)
    engine_side = box._container
    removing = threading.Event()
    remove = engine_side.remove

    def slow_remove(**kwargs):  # the first close is half-way: the container is still in the engine
        removing.set()
        time.sleep(1.0)
        return remove(**kwargs)

    engine_side.remove = slow_remove
    first = threading.Thread(target=box.close)
    first.start()
    try:
        assert removing.wait(30)
        box.close()
        assert client.containers.list(all=True, filters={"name": box.name}) == []
    finally:
        first.join(30)
    assert box.id is None and box not in Container._open
