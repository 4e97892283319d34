"""Issue 13: checkpoints survive ``kill -9`` at any point of a save, and pruning keeps the newest.

A real subprocess saves a small model and its Adam state in a loop (each step number saved twice in a row,
so half the saves replace the folder the pointer names) and is killed with SIGKILL at a random moment,
several times; after each kill the newest complete checkpoint must load, whole and self-consistent."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from skygym_train import checkpoint as ckpt

REPO = Path(__file__).resolve().parents[2]

# A zygote imports torch once and forks one saver per round, so a round costs its sleep, not an import of
# torch; the test kills each saver itself with SIGKILL, and the zygote reports how it died.
SAVER = textwrap.dedent(
    """
    import io, os, sys
    from pathlib import Path

    import numpy
    import torch

    from skygym_train import checkpoint as ckpt


    def say(*words):
        # One write per line: print() writes its pieces one by one where stdout is unbuffered (PYTHONUNBUFFERED),
        # and a kill between them once left "saved 18369" without its newline, the zygote's "died" line joined to
        # it, and the test waiting for a "died" line that had already come.
        os.write(1, (" ".join(map(str, words)) + "\\n").encode())


    def saver(root):
        model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256))
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        ckpt.recover_interrupted_saves(root)  # what the trainer does when it starts
        latest = ckpt.latest_checkpoint(root)
        counter = 0
        if latest is not None:
            policy = ckpt.load_worker_state(latest, "policy")
            model.load_state_dict(policy["model"])
            optimizer.load_state_dict(policy["optimizer"])
            counter = ckpt.load_trainer_state(latest)["counter"]
        torch.save(model.state_dict(), io.BytesIO())  # warm up, so the kill lands among saves
        say("ready", os.getpid(), counter)
        while True:
            counter += 1
            with torch.no_grad():
                for p in model.parameters():
                    p.fill_(float(counter))
            model(torch.ones(4, 256)).sum().backward()
            optimizer.step()
            with torch.no_grad():
                for p in model.parameters():
                    p.fill_(float(counter))
            step = 1 + (counter // 2) % 3  # 1, 2, 2, 3, 3, 1, 1, ...: every other save replaces the pointed-to step
            policy = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "counter": counter}
            ckpt.save_checkpoint(root, step, {"policy": policy}, {"global_step": step, "counter": counter}, max_to_keep=2)
            say("saved", os.getpid(), counter)


    torch.set_num_threads(1)
    warm = torch.nn.Linear(2, 2)  # the first optimizer pulls in lazy imports (seconds): do it once, here
    torch.optim.Adam(warm.parameters()).step()
    torch.save({"w": warm.state_dict()}, io.BytesIO())
    for command in sys.stdin:
        pid = os.fork()
        if pid == 0:
            try:
                saver(Path(sys.argv[1]))
            finally:
                os._exit(1)
        _, status = os.waitpid(pid, 0)
        say("died", pid, os.WTERMSIG(status) if os.WIFSIGNALED(status) else -1)
    """
)


def _check_complete(folder: Path) -> int:
    """The counter of a checkpoint whose files all come from one save; fails otherwise."""
    trainer_state = ckpt.load_trainer_state(folder)
    policy = ckpt.load_worker_state(folder, "policy")
    assert policy is not None, f"{folder} has no policy.pt"
    counter = trainer_state["counter"]
    assert policy["counter"] == counter, f"{folder}: policy.pt from save {policy['counter']}, trainer state from {counter}"
    for name, tensor in policy["model"].items():
        assert torch.all(tensor == float(counter)), f"{folder}: {name} is not from save {counter}"
    assert len(policy["optimizer"]["state"]) == 4, f"{folder}: optimizer state is incomplete"
    assert trainer_state["global_step"] == 1 + (counter // 2) % 3
    assert "rng" in trainer_state
    return counter


@pytest.mark.timeout(600)  # a line the test misreads waits for ever on the zygote: fail, with the stacks, instead
def test_kill_9_at_random_points_of_saving_always_leaves_a_complete_latest_checkpoint(tmp_path):
    root = tmp_path / "ckpts"
    script = tmp_path / "saver.py"
    script.write_text(SAVER)
    # the savers on the CPU, GPU or not: a CUDA context per forked saver (the RNG state it saves) would take longer
    # than most of the kill delays
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), CUDA_VISIBLE_DEVICES="")
    zygote = subprocess.Popen([sys.executable, str(script), str(root)], cwd=str(REPO), env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rng = random.Random(13)
    rounds, expected_start, kills_mid_save, kills_mid_swap, saves = 20, 0, 0, 0, 0
    try:
        for round_ in range(rounds):
            zygote.stdin.write("go\n")
            zygote.stdin.flush()
            ready = zygote.stdout.readline().split()
            assert ready[:1] == ["ready"], f"saver did not start: {ready} {zygote.stderr.read() if zygote.poll() is not None else ''}"
            pid, start = int(ready[1]), int(ready[2])
            assert start == expected_start, f"round {round_}: resumed at save {start}, expected {expected_start}"
            time.sleep(rng.uniform(0.05, 1.0))
            os.kill(pid, signal.SIGKILL)
            saved = []
            for line in zygote.stdout:
                words = line.split()
                assert len(words) == 3 and words[0] in ("saved", "died"), f"round {round_}: unreadable line {line!r}"
                if words[0] == "died":
                    assert words[1:] == [str(pid), str(int(signal.SIGKILL))], f"saver ended otherwise: {line}"
                    break
                saved.append(int(words[2]))
            last_saved = saved[-1] if saved else expected_start
            saves += len(saved)
            leftovers = [p.name for p in root.iterdir() if p.name.startswith(".")] if root.exists() else []
            kills_mid_save += bool(leftovers)
            kills_mid_swap += any(name.startswith(".old_") for name in leftovers)
            folder = ckpt.latest_checkpoint(root)
            if folder is None:  # killed before the first save ever finished
                assert last_saved == 0
                continue
            counter = _check_complete(folder)
            # the last save reported, or the one after it when the kill came after its pointer was written
            assert counter in (last_saved, last_saved + 1), f"round {round_}: loaded save {counter}, last reported {last_saved}"
            expected_start = counter
    finally:
        zygote.stdin.close()
        zygote.kill()
        zygote.wait(timeout=60)
    assert saves > rounds, f"only {saves} saves in {rounds} rounds: the kills did not exercise saving"
    ckpt.recover_interrupted_saves(root)
    names = {p.name for p in root.iterdir()}
    assert not [n for n in names if n.startswith(".")], f"temporary folders left after recovery: {names}"
    assert ckpt.LATEST_FILE in names
    _check_complete(ckpt.latest_checkpoint(root))
    print(f"{saves} saves; of {rounds} kills, {kills_mid_save} left temporary folders, {kills_mid_swap} a moved-aside copy")


def _save(root: Path, step: int, value: float, keep: int = -1) -> Path:
    return ckpt.save_checkpoint(root, step, {"policy": {"w": torch.full((4,), value)}}, {"global_step": step, "value": value},
                                max_to_keep=keep)


def _steps(root: Path):
    return sorted(int(p.name.rsplit("_", 1)[1]) for p in root.glob("global_step_*") if p.name[12:].isdigit())


def test_resaving_a_step_replaces_it_whole(tmp_path):
    _save(tmp_path, 1, 1.0)
    _save(tmp_path, 1, 2.0)
    folder = ckpt.latest_checkpoint(tmp_path)
    assert folder == ckpt.step_dir(tmp_path, 1)
    assert ckpt.load_worker_state(folder, "policy")["w"].tolist() == [2.0] * 4
    assert ckpt.load_trainer_state(folder)["value"] == 2.0
    assert {p.name for p in tmp_path.iterdir()} == {ckpt.LATEST_FILE, "global_step_1"}


def test_a_save_killed_between_its_two_renames_still_resumes_and_is_recovered(tmp_path):
    """The on-disk state a kill leaves between moving the old copy of the pointed-to step aside and renaming
    the new one in: the old copy under .old_, the new one (maybe half-written) under .tmp_."""
    _save(tmp_path, 1, 1.0)
    _save(tmp_path, 2, 2.0)
    os.rename(tmp_path / "global_step_2", tmp_path / ".old_global_step_2")
    partial = tmp_path / ".tmp_global_step_2.12345"
    partial.mkdir()
    (partial / "policy.pt").write_bytes(b"\x80\x02half a file")
    folder = ckpt.latest_checkpoint(tmp_path)  # a reader: loads the moved-aside copy and changes nothing
    assert ckpt.load_trainer_state(folder)["value"] == 2.0 and partial.exists()
    ckpt.recover_interrupted_saves(tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == {ckpt.LATEST_FILE, "global_step_1", "global_step_2"}
    assert ckpt.load_trainer_state(ckpt.latest_checkpoint(tmp_path))["value"] == 2.0


def test_a_save_killed_after_renaming_in_keeps_the_new_copy(tmp_path):
    _save(tmp_path, 2, 1.0)
    old = tmp_path / ".old_global_step_2"
    os.rename(tmp_path / "global_step_2", old)
    _save(tmp_path, 2, 2.0)  # ends by removing its own .old_; put one back as a kill before that would leave it
    _save(tmp_path, 3, 9.0)
    os.rename(tmp_path / "global_step_3", old)
    ckpt.recover_interrupted_saves(tmp_path)
    assert not old.exists()
    assert ckpt.load_trainer_state(ckpt.step_dir(tmp_path, 2))["value"] == 2.0


def test_pruning_keeps_the_most_recent_saves(tmp_path):
    for step in range(1, 6):
        _save(tmp_path, step, float(step), keep=2)
    assert _steps(tmp_path) == [4, 5]
    assert ckpt.latest_checkpoint(tmp_path) == ckpt.step_dir(tmp_path, 5)


def test_pruning_never_removes_the_newest_save_of_a_run_resumed_from_an_earlier_step(tmp_path):
    for step in range(1, 6):
        _save(tmp_path, step, float(step), keep=3)
    # a run resumed from step 1 (resume_mode=from_path) saves step 2 again: the lowest step number, the newest save
    _save(tmp_path, 2, 20.0, keep=3)
    assert 2 in _steps(tmp_path) and len(_steps(tmp_path)) == 3
    assert ckpt.load_trainer_state(ckpt.latest_checkpoint(tmp_path))["value"] == 20.0
    _save(tmp_path, 3, 30.0, keep=1)
    assert _steps(tmp_path) == [3]


def test_pruning_never_removes_the_pointed_to_step(tmp_path):
    for step in (1, 2, 3):
        _save(tmp_path, step, float(step))
    (tmp_path / ckpt.LATEST_FILE).write_text("1")
    (tmp_path / "global_step_notanumber").mkdir()
    removed = ckpt.prune_checkpoints(tmp_path, keep=1, protect=[3])
    assert removed == [2] and _steps(tmp_path) == [1, 3]
    assert (tmp_path / "global_step_notanumber").is_dir()


def test_a_torn_or_foreign_pointer_is_named_in_the_error(tmp_path):
    _save(tmp_path, 1, 1.0)
    (tmp_path / ckpt.LATEST_FILE).write_text("step one")
    with pytest.raises(ValueError, match="should hold a step number, found 'step one'"):
        ckpt.latest_checkpoint(tmp_path)
