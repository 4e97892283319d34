"""Getting the policy's new weights into the inference engines after each step.

Three ways, picked by ``generator.weight_sync_backend`` (``auto`` chooses by ``generator.backend``):

- ``inprocess`` (auto for ``hf`` and ``vllm`` without Ray): the policy's unsharded state dict is handed to the engine's
  ``update_weights`` in the same process (through Ray's object store only if chosen by hand with Ray workers);
- ``gloo`` / ``nccl`` (auto for ``hf`` and ``vllm`` with Ray workers: nccl on GPU, gloo on CPU): policy rank 0 broadcasts every tensor
  over a process group of its own that it shares with the engine side (``WeightReceiver``), which is
  separate from the FSDP group, so the engines never join training collectives;
- ``checkpoint`` (auto for ``remote`` and ``sglang``): rank 0 writes every weight (tied ones too) to one
  safetensors file beside ``config.json`` and each engine reloads from that folder (``update_weights(path)``:
  SGLang's ``/update_weights_from_disk``, vLLM's ``reload_weights``).
"""

from __future__ import annotations

import datetime
import json
import socket
import tempfile
import threading
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch


def resolve_backend(cfg: Any) -> str:
    g = cfg.generator
    if g.weight_sync_backend != "auto":
        return g.weight_sync_backend
    if g.backend in ("remote", "sglang"):
        return "checkpoint"
    if g.backend in ("vllm", "hf") and cfg.trainer.use_ray:
        # policy ranks are Ray actors, the engines live here: broadcast over a group of their own rather than
        # pickling a full state dict through Ray's object store
        return "nccl" if torch.cuda.is_available() else "gloo"
    return "inprocess"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


class BroadcastGroup:
    """A process group of its own (TCPStore + gloo/NCCL) between policy rank 0 (rank 0) and receivers."""

    def __init__(self, backend: str, host: str, port: int, rank: int, world_size: int, timeout_s: float = 300):
        timeout = datetime.timedelta(seconds=timeout_s)
        self.store = torch.distributed.TCPStore(host, port, world_size, rank == 0, timeout=timeout)
        self.rank, self.world_size, self.backend = rank, world_size, backend
        if backend == "gloo":
            self.pg = torch.distributed.ProcessGroupGloo(self.store, rank, world_size, timeout)
            self.device = torch.device("cpu")
        elif backend == "nccl":
            self.pg = torch.distributed.ProcessGroupNCCL(self.store, rank, world_size)
            self.device = torch.device("cuda", torch.cuda.current_device())
        else:
            raise ValueError(f"broadcast weight sync supports gloo or nccl, not {backend!r}")

    def broadcast(self, tensor: torch.Tensor) -> torch.Tensor:
        opts = torch.distributed.BroadcastOptions()
        opts.rootRank = 0
        self.pg.broadcast([tensor], opts).wait()
        return tensor


def _encode(meta: Any) -> torch.Tensor:
    return torch.tensor(list(json.dumps(meta).encode()), dtype=torch.uint8)


def send_state_dict(group: BroadcastGroup, state: Dict[str, torch.Tensor]) -> int:
    """Rank 0: broadcast names/shapes/dtypes, then each tensor. Returns bytes sent."""
    names = sorted(state)
    meta = [[n, list(state[n].shape), str(state[n].dtype).replace("torch.", "")] for n in names]
    header = _encode(meta).to(group.device)
    group.broadcast(torch.tensor([header.numel()], dtype=torch.long, device=group.device))
    group.broadcast(header)
    sent = 0
    for name in names:
        tensor = state[name].to(group.device).contiguous()
        group.broadcast(tensor)
        sent += tensor.numel() * tensor.element_size()
    return sent


def receive_state_dict(group: BroadcastGroup) -> Iterator[Tuple[str, torch.Tensor]]:
    """Receivers: yield ``(name, tensor)`` as each arrives (engines may load them one by one)."""
    length = group.broadcast(torch.zeros(1, dtype=torch.long, device=group.device))
    header = group.broadcast(torch.zeros(int(length.item()), dtype=torch.uint8, device=group.device))
    meta = json.loads(bytes(header.cpu().tolist()).decode())
    for name, shape, dtype in meta:
        buffer = torch.empty(shape, dtype=getattr(torch, dtype), device=group.device)
        yield name, group.broadcast(buffer)


class WeightReceiver:
    """Engine side of a broadcast sync, for an engine with ``update_weights(named_tensors)``.

    For engines in this process (hf) it runs the receive in a thread while the policy sends; a vLLM
    worker extension uses ``receive_state_dict`` the same way inside each engine worker.
    """

    def __init__(self, backend: str, host: str, port: int, rank: int, world_size: int):
        self._args = (backend, host, port, rank, world_size)
        self.group: Optional[BroadcastGroup] = None

    def connect(self) -> None:
        self.group = BroadcastGroup(*self._args)

    def receive(self) -> Dict[str, torch.Tensor]:
        assert self.group is not None, "connect() first"
        return {name: tensor.cpu().clone() for name, tensor in receive_state_dict(self.group)}


class EngineWeightSync:
    """Keeps the broadcast group (if any) between steps and runs one sync per call."""

    def __init__(self, cfg: Any, policy: Any, engine: Any, runner: Any):
        self.cfg, self.policy, self.engine, self.runner = cfg, policy, engine, runner
        self.backend = resolve_backend(cfg)
        self.receiver: Optional[WeightReceiver] = None
        self.sync_dir: Optional[Path] = None
        self.bytes_last = 0

    def sync(self) -> None:
        if self.backend == "inprocess":
            state = self.policy.call("full_state_dict")[0]
            self.runner.run(self.engine.update_weights(state))
            self.bytes_last = sum(t.numel() * t.element_size() for t in state.values())
        elif self.backend == "checkpoint":
            if self.sync_dir is None:
                self.sync_dir = Path(tempfile.mkdtemp(prefix="skyrl-weight-sync-"))
            self.bytes_last = int(self.policy.call("save_weights", str(self.sync_dir))[0])
            self.runner.run(self.engine.update_weights(str(self.sync_dir)))
        else:
            self._broadcast()

    def _broadcast(self) -> None:
        if self.receiver is None:
            host, port = "127.0.0.1", free_port()
            self.receiver = WeightReceiver(self.backend, host, port, rank=1, world_size=2)
            self._call_policy_async("connect_weight_broadcast", self.backend, host, port, 2)
            self.receiver.connect()
            self._wait_policy()
        received: Dict[str, Dict[str, torch.Tensor]] = {}
        thread = threading.Thread(target=lambda: received.setdefault("state", self.receiver.receive()))  # type: ignore[union-attr]
        thread.start()
        sizes = self.policy.call("broadcast_weights")
        thread.join()
        self.bytes_last = int(sizes[0])
        self.runner.run(self.engine.update_weights(received["state"]))

    def _call_policy_async(self, method: str, *args: Any) -> None:
        result: List[Any] = []
        self._pending = threading.Thread(target=lambda: result.append(self.policy.call(method, *args)))
        self._pending.start()

    def _wait_policy(self) -> None:
        self._pending.join()
