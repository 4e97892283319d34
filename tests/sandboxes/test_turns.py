"""Turns: a freed slot goes to the waiting key that holds the fewest, and a wait given up holds nothing."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time

import pytest

from skygym_sandboxes.turns import NotStarted, Turns, _Waiter, turn_key


def _queue(turns: Turns, key, served: list, hold_s: float = 0.0) -> threading.Thread:
    """A thread that waits for a turn as ``key``, notes its key once it has the slot, holds it ``hold_s``."""
    before = turns.waiting()

    def wait() -> None:
        with turns.turn(key):
            served.append(key)
            time.sleep(hold_s)

    thread = threading.Thread(target=wait)
    thread.start()
    deadline = time.monotonic() + 10
    while turns.waiting() == before and time.monotonic() < deadline:  # in line before the next one comes
        time.sleep(0.001)
    assert turns.waiting() == before + 1
    return thread


def test_a_key_with_one_call_waiting_is_served_before_the_queue_of_another():
    turns, served = Turns(1), []
    with turns.turn("attacker"):
        threads = [_queue(turns, "attacker", served) for _ in range(3)] + [_queue(turns, "honest", served)]
    for thread in threads:
        thread.join(10)
    assert served == ["honest", "attacker", "attacker", "attacker"]


def test_keys_take_turns_and_one_keys_calls_keep_their_order():
    turns, served = Turns(1), []
    with turns.turn("c"):
        threads = [_queue(turns, key, served) for key in ("a1", "a1", "b1", "b1", "a1")]
    for thread in threads:
        thread.join(10)
    assert served == ["a1", "b1", "a1", "b1", "a1"]


def test_with_two_slots_the_key_holding_fewer_goes_first():
    turns, served = Turns(2), []
    with turns.turn("a"):
        with turns.turn("a"):  # "a" holds both slots, and also waits first
            threads = [_queue(turns, "a", served, hold_s=0.2), _queue(turns, "b", served, hold_s=0.2)]
        for thread in threads:  # one slot freed: "a" holds the other, so "b" goes first
            thread.join(10)
    assert served == ["b", "a"]


def test_one_key_is_first_come_first_served_and_the_context_names_the_key():
    turns, served = Turns(1), []
    token = turn_key.set("trainer")
    try:
        with turns.turn():
            threads = [_queue(turns, "trainer", served) for _ in range(3)]
            assert turns._held == {"trainer": 1}
    finally:
        turn_key.reset(token)
    for thread in threads:
        thread.join(10)
    assert served == ["trainer"] * 3 and turns._free == 1 and not turns._held


def test_a_wait_that_times_out_holds_nothing():
    turns = Turns(1)
    with turns.turn("a"):
        with pytest.raises(TimeoutError, match="no slot of 1 became free within 0.05 s"):
            with turns.turn("b", timeout=0.05):
                pass
        assert turns.waiting() == 0
    with turns.turn("b", timeout=0.05):  # the slot came back
        assert turns._held == {"b": 1}
    assert turns._free == 1 and not turns._held


def test_an_infinite_time_limit_is_no_limit():
    """``timeout=inf`` waits in line like no limit (polled for: a 0.05 s sleep could end before the thread was in
    line on a loaded machine)."""
    turns, served = Turns(1), []
    with turns.turn("a"):
        thread = threading.Thread(target=lambda: _hold(turns, "b", float("inf"), served))
        thread.start()
        deadline = time.monotonic() + 30
        while turns.waiting() == 0 and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.001)
        assert turns.waiting() == 1
    thread.join(10)
    assert served == ["b"] and turns._free == 1


def _hold(turns: Turns, key, timeout, served: list) -> None:
    with turns.turn(key, timeout=timeout):
        served.append(key)


def test_a_slot_that_reached_a_waiter_as_it_gave_up_is_passed_on():
    turns, served = Turns(1), []
    with turns.turn("a"):
        late = turns._join("b", lambda: None)  # in line, and then the slot reaches it ...
        after = _queue(turns, "c", served)
    assert late.granted
    turns._leave(late)  # ... as it stops waiting: the next in line gets the slot
    after.join(10)
    assert served == ["c"] and turns._free == 1 and not turns._held


def test_a_slot_or_place_is_given_back_once_however_often_its_leaving_is_tried():
    # turn() tries again when Ctrl-C interrupts its giving back; a second try must not give back a second slot
    turns = Turns(2)
    with turns.turn("other"):
        holding = _Waiter("a", lambda: None)
        turns._enter(holding)
        waiting = _Waiter("b", lambda: None)
        turns._enter(waiting)
        assert holding.granted and not waiting.granted and turns.waiting() == 1
        for _ in range(2):
            turns._leave(waiting)
        assert turns.waiting() == 0 and turns._held == {"other": 1, "a": 1}
        for _ in range(2):
            turns._leave(holding)
        assert turns._free == 1 and turns._held == {"other": 1}
    assert turns._free == 2 and not turns._held


def test_submitted_calls_are_served_by_key_and_one_cancelled_while_waiting_holds_nothing():
    async def main() -> list:
        turns, served = Turns(1), []
        executor = concurrent.futures.ThreadPoolExecutor(1)
        with turns.turn("a"):
            queued = [asyncio.wrap_future(turns.submit(executor, served.append, key, key=key)) for key in "aab"]
            gone = asyncio.wrap_future(turns.submit(executor, served.append, "d", key="d"))
            assert turns.waiting() == 4
            gone.cancel()
            await asyncio.sleep(0.01)
            assert turns.waiting() == 3
        await asyncio.gather(*queued)
        executor.shutdown()
        assert turns._free == 1 and not turns._held
        return served

    assert asyncio.run(main()) == ["b", "a", "a"]


def test_a_call_not_started_by_its_start_by_time_never_runs_and_holds_nothing():
    """The judge's async verdicts waited for a thread past their deadline, however long (a helper's pass):
    ``run_in_thread(start_by=)`` gives up on a call still in line then, and the call never runs; one already
    running is awaited to its end."""
    async def main() -> list:
        turns, ran = Turns(1), []
        executor = concurrent.futures.ThreadPoolExecutor(1)
        with turns.turn("holder"):  # the one slot, held past the start-by time
            with pytest.raises(NotStarted):
                await turns.run_in_thread(executor, ran.append, "late", start_by=time.monotonic() + 0.2)
            assert turns.waiting() == 0
        start_by = time.monotonic() + 2  # room for a loaded machine to start it; it runs on past that time

        def past_start_by() -> str:
            while time.monotonic() < start_by + 0.3:
                time.sleep(0.05)
            return "ran to its end"

        assert await turns.run_in_thread(executor, past_start_by, start_by=start_by) == "ran to its end"
        assert await turns.run_in_thread(executor, ran.append, "free", start_by=time.monotonic() + 30) is None
        executor.shutdown()
        assert turns._free == 1 and not turns._held
        return ran

    assert asyncio.run(main()) == ["free"]


def test_a_submitted_call_gives_its_slot_back_from_its_thread_with_no_event_loop_running():
    """With the slot handed and returned by an event loop, a busy loop left workers idle (512 sandbox runs: 21 s
    instead of 2.6, an attacker's pass); and a task left on a stopped loop kept its slot for ever."""
    turns = Turns(1)
    executor = concurrent.futures.ThreadPoolExecutor(2)
    with turns.turn("a"):
        later = turns.submit(executor, lambda: "ran", key="b")  # no loop anywhere
    assert later.result(timeout=10) == "ran"
    assert turns._free == 1 and not turns._held  # given back by the thread, before the result
    executor.shutdown()


def test_a_submitted_call_takes_no_second_slot_in_its_thread_and_its_errors_reach_the_caller():
    turns = Turns(1)
    executor = concurrent.futures.ThreadPoolExecutor(1)

    def pool_call():  # what a pool's run does in there: its own turn() passes
        with turns.turn("a", timeout=0.1):
            return dict(turns._held)

    assert turns.submit(executor, pool_call, key="a").result(timeout=10) == {"a": 1}
    with turns.turn("a"):
        with pytest.raises(TimeoutError):  # another thread waits as anyone does
            with turns.turn("a", timeout=0.05):
                pass
    failing = turns.submit(executor, int, "x", key="a")
    with pytest.raises(ValueError, match="invalid literal"):
        failing.result(timeout=10)
    executor.shutdown()
    closed = turns.submit(executor, int, "1", key="a")  # a shut-down executor: its error, and the slot back
    with pytest.raises(RuntimeError, match="after shutdown"):
        closed.result(timeout=10)
    assert turns._free == 1 and not turns._held


def test_calls_an_executor_drops_at_its_shutdown_give_their_slots_back():
    turns = Turns(2)
    executor = concurrent.futures.ThreadPoolExecutor(1)
    release = threading.Event()
    running = turns.submit(executor, release.wait, 10, key="a")
    dropped = turns.submit(executor, int, "1", key="b")  # queued in the executor behind the running one
    executor.shutdown(wait=False, cancel_futures=True)
    release.set()
    assert running.result(timeout=10) is True and dropped.cancelled()
    assert turns._free == 2 and not turns._held


def test_at_least_one_slot():
    with pytest.raises(ValueError, match="at least one slot"):
        Turns(0)


def test_a_key_served_recently_waits_behind_one_served_longer_ago_even_after_going_idle():
    """A key sending one call at a time is idle between its calls: forgotten then, it came back as one never served,
    ahead of keys that keep calls waiting (a client with one call in flight took 45 % of one slot beside two
    clients with four each, in an attacker's pass)."""
    turns, order = Turns(1), []

    def join(key):
        return turns._join(key, lambda: order.append(key))

    assert join("A") is None  # A holds the slot
    join("B"), join("B")
    turns._release("A")  # -> B
    join("C")
    turns._release("B")  # -> C: never served
    turns._release("C")  # -> B; C is idle now, A has been since its release
    join("C"), join("A")  # both come back: A was served longer ago
    turns._release("B")
    assert order == ["B", "C", "B", "A"]


def test_what_turns_remember_of_idle_keys_stays_bounded():
    turns = Turns(2)
    with turns.turn("holds-for-long"):
        for number in range(2000):
            with turns.turn(f"client-{number}"):
                pass
        assert len(turns._served) < 100
    assert not turns._held and turns._free == 2


def test_thousands_of_waiters_of_a_shut_down_executor_all_get_an_error_and_every_slot_comes_back():
    """Each failed hand-off passed the slot on by recursion: past about 490 waiters the interpreter's depth was
    passed part-way, and no waiter ever answered (a closed sandbox with 1,000 runs waiting: an attacker's pass)."""
    turns = Turns(2)
    executor = concurrent.futures.ThreadPoolExecutor(2)
    release = threading.Event()
    # held until released, past the 2000 submits however slowly a loaded machine makes them (a cut wait is False)
    running = [turns.submit(executor, release.wait, 60, key="k") for _ in range(2)]
    waiting = [turns.submit(executor, int, "1", key=("k", n % 3)) for n in range(2000)]
    executor.shutdown(wait=False)
    release.set()
    assert [future.result(timeout=10) for future in running] == [True, True]
    errors = {type(future.exception(timeout=10)).__name__ for future in waiting}
    assert errors == {"RuntimeError"} and turns._free == 2 and not turns._held and not turns.waiting()


def test_shutting_an_executor_down_with_cancel_futures_does_not_deadlock_on_the_slots_it_gives_back():
    """A call that had its slot but sat in the executor's queue: shutdown(cancel_futures=True) gave the slot back
    from inside the executor's lock, to a waiter whose submit then waited on that lock for ever."""
    turns = Turns(2)
    executor = concurrent.futures.ThreadPoolExecutor(1)  # fewer threads than slots: a holder queues
    release = threading.Event()
    first = turns.submit(executor, release.wait, 10, key="a")
    queued = turns.submit(executor, int, "1", key="b")  # has its slot, waits for the executor's thread
    behind = turns.submit(executor, int, "2", key="c")  # waits for a slot
    stopper = threading.Thread(target=executor.shutdown, kwargs={"wait": False, "cancel_futures": True})
    stopper.start()
    stopper.join(10)
    assert not stopper.is_alive(), "shutdown(cancel_futures=True) hung"
    release.set()
    assert first.result(timeout=10) is True and queued.cancelled()
    assert isinstance(behind.exception(timeout=10), RuntimeError)
    assert turns._free == 2 and not turns._held


def test_an_executor_that_fails_a_call_without_running_it_gives_the_slot_back():
    turns = Turns(1)
    broken = concurrent.futures.ThreadPoolExecutor(1, initializer=lambda: 1 / 0)  # every call fails unrun
    calls = [turns.submit(broken, str, n, key=key) for n, key in enumerate("ab")]
    for call in calls:
        assert isinstance(call.exception(timeout=10), (concurrent.futures.BrokenExecutor, RuntimeError))
    assert turns._free == 1 and not turns._held and not turns.waiting()


def test_a_key_that_cannot_be_a_key_fails_before_anything_is_taken():
    """An unhashable key (turn_key is anyone's to set) took a free slot for good (an attacker's pass)."""
    turns = Turns(1)
    with pytest.raises(TypeError, match="unhashable"):
        with turns.turn([]):
            pass
    with pytest.raises(TypeError, match="unhashable"):
        turns.submit(concurrent.futures.ThreadPoolExecutor(1), int, "1", key={})
    assert turns._free == 1 and not turns._held


def test_a_failed_hand_off_is_told_once_its_slot_is_back():
    """The future of a call whose executor was shut down failed while it still held its slot: a done-callback
    that took a turn waited on that slot (an attacker's pass)."""
    turns = Turns(1)
    executor = concurrent.futures.ThreadPoolExecutor(1)
    executor.shutdown()
    seen = []
    failed = turns.submit(executor, int, "1", key="a")
    failed.add_done_callback(lambda _: seen.append(turns._free))  # (already failed: called at once)
    assert isinstance(failed.exception(timeout=10), RuntimeError) and seen == [1]


def test_a_forked_child_holds_none_of_its_parents_slots():
    import os

    turns = Turns(1)
    with turns.turn("parent"):
        child = os.fork()
        if child == 0:  # the child: the parent's holder is not here, so its slot is free
            try:
                with turns.turn("child", timeout=5):
                    os._exit(0)
            except BaseException:
                os._exit(1)
        _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and turns._free == 1

