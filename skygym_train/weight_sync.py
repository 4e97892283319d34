"""Getting the policy's new weights into the inference engines after each step, at the cost of the transport.

``generator.weight_sync_backend`` picks how (``auto`` chooses by ``generator.backend`` and where the policy runs):

- ``inprocess`` (auto for ``hf`` and ``vllm`` without Ray): the engine lives in the policy's process. An ``hf``
  engine on the policy's device and dtype then *shares* the policy's parameter tensors: nothing is copied at all,
  each step's optimizer update is what the next rollout reads. An ``hf`` engine in the dtype the policy computes
  in under autocast (bf16 on one GPU) *lends* the policy its own weights instead: the policy writes its new
  weights into them after each optimizer step and computes with them in place of autocast's casts
  (``workers.borrowed_weights``), so one bf16 copy of the model serves both and the sync itself moves nothing.
  Otherwise (a vLLM engine, fp32 compute beside a bf16 engine, LoRA, FSDP shards, one-step-off async training,
  where generation overlaps the update) the policy's unsharded state dict is handed to the engine's
  ``update_weights`` (one copy);
- ``shm`` (auto for ``hf`` with Ray CPU workers, sync training): the policy is one unsharded Ray actor on this node.
  It moves its parameters into one shared-memory file (``/dev/shm``) and the engine maps the same pages: no copy
  per step either. Where that cannot hold (several FSDP ranks, another node, another dtype, LoRA, async
  training), ``auto`` falls back to the broadcast below (``shm`` chosen by hand fails with the reason);
- ``gloo`` / ``nccl`` (auto for ``vllm`` with Ray workers, and the fall-back above: nccl on GPU, gloo on CPU):
  policy rank 0 broadcasts the weights over a process group of its own that it shares with the engine side
  (``WeightReceiver``), separate from the FSDP group, so the engines never join training collectives. The tensors
  travel cast to the engine's dtype and packed into a few flat buckets (``BUCKET_BYTES`` each), and land in
  receive buffers that are kept between steps; nothing is pickled through Ray's object store;
- ``checkpoint`` (auto for ``remote`` and ``sglang``): rank 0 writes every weight (tied ones too) to one
  safetensors file beside ``config.json`` and each engine reloads from that folder (``update_weights(path)``:
  SGLang's ``/update_weights_from_disk``, vLLM's ``reload_weights``).

Engines as Ray actors (``generator.run_engines_locally=true`` with Ray, see ``engine_actors``) take the broadcast
too (``auto``: nccl for actors on GPUs of their own, gloo otherwise): policy rank 0 hosts the group's rendezvous on
its own node's IP, every actor joins it with a ``WeightReceiver`` and loads what it receives, wherever it runs; the
weights never pass through the driver.

``EngineWeightSync.bytes_last`` is what the last sync moved (0 when shared or lent); the trainer logs it per step as
``weight_sync/bytes`` beside ``timing/sync``.
"""

from __future__ import annotations

import datetime
import json
import logging
import math
import os
import socket
import tempfile
import threading
import uuid
from typing import Any, Dict, Iterable, List, Optional, Tuple

import torch

from skygym_adapters.engines.client import engines_behind
from skygym_adapters.engines.weights_folder import SaveFolder

logger = logging.getLogger(__name__)

BUCKET_BYTES = 256 << 20
"""The largest flat bucket a broadcast sends (whole tensors; one larger tensor travels alone)."""

_ALIGN = 64  # bytes: each tensor in a shared file or a bucket starts on a cache line


def resolve_backend(cfg: Any) -> str:
    """The backend asked for, or the one ``auto`` prefers (``shm`` may still fall back to gloo at run time)."""
    g = cfg.generator
    if g.weight_sync_backend != "auto":
        return g.weight_sync_backend
    if g.backend in ("remote", "sglang"):
        return "checkpoint"
    from skygym_train.config.validation import engines_are_ray_actors

    if engines_are_ray_actors(cfg):
        # a colocated actor shares policy rank 0's GPU, which NCCL refuses between two processes: gloo then
        colocated = cfg.trainer.placement.colocate_all
        return "nccl" if torch.cuda.is_available() and not colocated else "gloo"
    if g.backend in ("vllm", "hf") and cfg.trainer.use_ray:
        if g.backend == "hf" and not torch.cuda.is_available() and not cfg.trainer.async_training.enabled:
            return "shm"
        # policy ranks are Ray actors, the engines live here: broadcast over a group of their own rather than
        # pickling a full state dict through Ray's object store
        return _broadcast_backend(cfg)
    return "inprocess"


def _broadcast_backend(cfg: Any) -> str:
    """nccl between GPUs; gloo on CPU, and where the engines in this process share GPU 0 with a colocated
    policy rank 0 (NCCL refuses two ranks on one GPU)."""
    return "nccl" if torch.cuda.is_available() and not cfg.trainer.placement.colocate_all else "gloo"


def cuda_device_uuid() -> Optional[str]:
    """The UUID of this process's current CUDA device (one GPU has one UUID in every process), or None."""
    if not torch.cuda.is_available():
        return None
    return str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _aligned(numel: int, dtype: torch.dtype) -> int:
    """``numel`` rounded up so that the next tensor starts on an ``_ALIGN``-byte boundary."""
    per = max(1, _ALIGN // torch.empty(0, dtype=dtype).element_size())
    return -(-numel // per) * per


# ---------------------------------------------------------------------- shared memory (no copy across processes)
def shared_memory_dir() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()


def move_parameters_to_shared_file(named: List[Tuple[str, torch.nn.Parameter]], path: str) -> Dict[str, Any]:
    """Give each parameter storage in one file-backed shared buffer (values kept; the Parameter objects, and so the
    optimizer's hold on them, stay the same). Returns what another process needs to map the same pages."""
    dtype = named[0][1].dtype
    total = sum(_aligned(p.numel(), dtype) for _, p in named)
    buffer = torch.from_file(path, shared=True, size=total, dtype=dtype)
    layout = []
    offset = 0
    with torch.no_grad():
        for name, param in named:
            view = buffer[offset : offset + param.numel()].view(param.shape)
            view.copy_(param.data)
            param.data = view
            layout.append([name, offset, list(param.shape)])
            offset += _aligned(param.numel(), dtype)
    return {"path": path, "numel": total, "dtype": dtype_name(dtype), "layout": layout, "buffer": buffer}


def map_shared_file(info: Dict[str, Any]) -> Dict[str, torch.Tensor]:
    """The other side of :func:`move_parameters_to_shared_file`: views of the same pages, by parameter name."""
    buffer = torch.from_file(info["path"], shared=True, size=int(info["numel"]), dtype=getattr(torch, info["dtype"]))
    return {name: buffer[offset : offset + math.prod(shape)].view(shape) for name, offset, shape in info["layout"]}


# ---------------------------------------------------------------------- broadcast over a process group of its own
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

    def close(self) -> None:
        """The group's connections and its store's socket (rank 0's listens for the others), closed now: a trainer
        kept after its run held them until it was collected."""
        group, self.pg = self.pg, None
        if group is not None and hasattr(group, "shutdown"):
            group.shutdown()
        self.store = None

    def broadcast(self, tensor: torch.Tensor) -> torch.Tensor:
        opts = torch.distributed.BroadcastOptions()
        opts.rootRank = 0
        self.pg.broadcast([tensor], opts).wait()
        return tensor


def _encode(meta: Any) -> torch.Tensor:
    return torch.tensor(list(json.dumps(meta).encode()), dtype=torch.uint8)


def plan_buckets(state: Dict[str, torch.Tensor], dtype: Optional[torch.dtype], bucket_bytes: int = BUCKET_BYTES
                 ) -> List[Dict[str, Any]]:
    """Group tensors (sorted by name) into flat buckets of one dtype each: floating tensors in ``dtype`` (the
    engine's) when given, others as they are. Each bucket: ``dtype``, ``numel`` and ``items`` of
    ``[name, offset, shape]``."""
    buckets: List[Dict[str, Any]] = []
    open_bucket: Dict[str, Dict[str, Any]] = {}
    for name in sorted(state):
        tensor = state[name]
        send = dtype if dtype is not None and tensor.is_floating_point() else tensor.dtype
        key = dtype_name(send)
        size = _aligned(tensor.numel(), send)
        element = torch.empty(0, dtype=send).element_size()
        bucket = open_bucket.get(key)
        if bucket is None or (bucket["numel"] + size) * element > bucket_bytes and bucket["items"]:
            bucket = {"dtype": key, "numel": 0, "items": []}
            buckets.append(bucket)
            open_bucket[key] = bucket
        bucket["items"].append([name, bucket["numel"], list(tensor.shape)])
        bucket["numel"] += size
    return buckets


def send_state_dict(group: BroadcastGroup, state: Dict[str, torch.Tensor], dtype: Optional[torch.dtype] = None,
                    bucket_bytes: int = BUCKET_BYTES) -> int:
    """Rank 0: broadcast the bucket plan, then each bucket (tensors cast to ``dtype``). Returns bytes sent."""
    buckets = plan_buckets(state, dtype, bucket_bytes)
    header = _encode(buckets).to(group.device)
    group.broadcast(torch.tensor([header.numel()], dtype=torch.long, device=group.device))
    group.broadcast(header)
    sent = 0
    for bucket in buckets:
        flat = torch.empty(bucket["numel"], dtype=getattr(torch, bucket["dtype"]), device=group.device)
        for name, offset, shape in bucket["items"]:
            tensor = state[name]
            flat[offset : offset + tensor.numel()].copy_(tensor.reshape(-1))  # casts to the bucket's dtype
        group.broadcast(flat)
        sent += flat.numel() * flat.element_size()
    return sent


def receive_state_dict(group: BroadcastGroup, buffers: Optional[Dict[int, torch.Tensor]] = None
                       ) -> Iterable[Tuple[str, torch.Tensor]]:
    """Receivers: every ``(name, tensor)`` sent, as views of the received buckets. ``buffers`` (bucket index ->
    flat tensor) keeps the receive buffers between calls; the views stay valid until the next receive into them."""
    length = group.broadcast(torch.zeros(1, dtype=torch.long, device=group.device))
    header = group.broadcast(torch.zeros(int(length.item()), dtype=torch.uint8, device=group.device))
    buckets = json.loads(bytes(header.cpu().tolist()).decode())
    buffers = {} if buffers is None else buffers
    received: List[Tuple[str, torch.Tensor]] = []
    for index, bucket in enumerate(buckets):
        dtype = getattr(torch, bucket["dtype"])
        flat = buffers.get(index)
        if flat is None or flat.numel() != bucket["numel"] or flat.dtype != dtype:
            flat = buffers[index] = torch.empty(bucket["numel"], dtype=dtype, device=group.device)
        group.broadcast(flat)
        for name, offset, shape in bucket["items"]:
            received.append((name, flat[offset : offset + math.prod(shape)].view(shape)))
    return received


class WeightReceiver:
    """Engine side of a broadcast sync, for an engine with ``update_weights(named_tensors)``.

    For engines in this process (hf, vllm) it runs the receive in a thread while the policy sends. The receive
    buffers are kept between steps; ``receive`` returns views of them (valid until the next ``receive``).
    """

    def __init__(self, backend: str, host: str, port: int, rank: int, world_size: int):
        self._args = (backend, host, port, rank, world_size)
        self.group: Optional[BroadcastGroup] = None
        self._buffers: Dict[int, torch.Tensor] = {}

    def connect(self) -> None:
        self.group = BroadcastGroup(*self._args)

    def receive(self) -> List[Tuple[str, torch.Tensor]]:
        assert self.group is not None, "connect() first"
        return list(receive_state_dict(self.group, self._buffers))

    def close(self) -> None:
        if self.group is not None:
            self.group.close()
            self.group = None
        self._buffers.clear()


# ---------------------------------------------------------------------- the trainer's side
def actor_engines(engine: Any) -> List[Any]:
    """The engines behind ``engine`` that are Ray actors receiving the broadcast themselves
    (``engine_actors.EngineActorClient``); empty when there are none."""
    return [e for e in engines_behind(engine) if hasattr(e, "connect_weight_receiver")]


def engine_dtype(engine: Any) -> Optional[torch.dtype]:
    """The dtype the engine's weights are in, where it says (``weight_dtype``); None: send as they are."""
    dtypes = {getattr(e, "weight_dtype", None) for e in engines_behind(engine)}
    return dtypes.pop() if len(dtypes) == 1 else None


class SharingUnavailable(RuntimeError):
    """The engine cannot share the policy's memory here; the message says why."""


class EngineWeightSync:
    """Picks the transport on the first sync, keeps its state (shared pages, broadcast group) and runs each sync.

    ``backend`` is the transport in use (``inprocess``, ``shm``, ``gloo``, ``nccl``, ``checkpoint``), ``shared`` is
    true when the engine reads the policy's own memory (nothing is copied per step), ``lent`` when the policy
    writes and computes with the engine's (nothing is copied at the sync: the policy writes after its update),
    ``bytes_last`` what the last sync moved.
    """

    def __init__(self, cfg: Any, policy: Any, engine: Any, runner: Any):
        self.cfg, self.policy, self.engine, self.runner = cfg, policy, engine, runner
        self.requested = resolve_backend(cfg)
        self.backend: Optional[str] = None
        self.shared = False
        self.lent = False
        self.fallback_reason: Optional[str] = None
        self.receiver: Optional[WeightReceiver] = None
        self.sync_dir = SaveFolder(None, "skyrl-weight-sync-")  # the checkpoint backend's, removed at close
        self.bytes_last = 0
        self._actors: List[Any] = []  # engine actors that receive the broadcast themselves
        self.rendezvous: Optional[str] = None
        """``host:port`` of policy rank 0's broadcast group, when the engines are Ray actors."""

    def close(self) -> None:
        """Remove what the sync left on disk (the checkpoint backend's folder: a whole model) and close its broadcast
        group on both sides (the policy's store listened until the trainer was collected)."""
        self.sync_dir.remove()
        if self.receiver is not None:
            self.receiver.close()
            self.receiver = None
        if self.backend in ("gloo", "nccl"):  # engine actors receiving it themselves close theirs as they stop
            try:
                self.policy.call("close_weight_broadcast")
            except Exception as exc:  # noqa: BLE001 - a policy that is gone took its group with it
                logger.warning("weight sync: closing the policy's broadcast group failed: %s", exc)

    def describe(self) -> str:
        if self.backend is None:
            return f"{self.requested} (not started)"
        if self.shared:
            how = "shared memory, no copy"
        elif self.lent:
            how = "the engine's weights are the policy's compute copy, written after each optimizer step"
        else:
            how = f"{self.bytes_last / 2**20:.0f} MiB per sync"
        if self._actors:
            how += f" to {len(self._actors)} engine actor(s) from {self.rendezvous}"
        note = f"; {self.fallback_reason}" if self.fallback_reason else ""
        return f"{self.backend} ({how}{note})"

    def prepare(self) -> None:
        """Choose the transport and set it up (shared pages, broadcast group): done once, before the first sync."""
        if self.backend is not None:
            return
        wanted = self.requested
        if wanted == "inprocess":
            try:
                self._share_in_process()
                self.shared = True
            except SharingUnavailable as no_share:
                try:
                    self._lend_in_process()
                    self.lent = True
                except SharingUnavailable as no_loan:
                    reasons = "; ".join(dict.fromkeys((str(no_share), str(no_loan))))  # each said once
                    logger.info("weight sync: the engine keeps a copy of its own (%s)", reasons)
            self.backend = "inprocess"
        elif wanted == "shm":
            try:
                self._share_through_file()
                self.shared = True
                self.backend = "shm"
            except SharingUnavailable as why:
                if self.cfg.generator.weight_sync_backend == "shm":
                    raise RuntimeError(f"generator.weight_sync_backend=shm: {why}") from None
                self.backend = _broadcast_backend(self.cfg)
                self.fallback_reason = f"no shared memory: {why}"
                logger.info("weight sync: %s broadcast (%s)", self.backend, why)
        else:
            self.backend = wanted
        if self.backend in ("gloo", "nccl"):
            self._connect_broadcast()
        logger.info("weight sync: %s", self.describe())

    def sync(self) -> None:
        self.prepare()
        if self.lent and not engines_behind(self.engine)[0].lends_weights():
            # recalled (or replaced) by someone else: the policy stops borrowing when it sees the recall, and the
            # weights reach the engine as they do for any engine in this process
            logger.warning("weight sync: the engine no longer lends the policy its weights; copying them from now on")
            self.lent = False
        if self.shared or self.lent:
            self._check_still_held()
            self.bytes_last = 0
        elif self.backend == "inprocess":
            # a policy in this process hands over its tensors where they are (on its GPU the engine copies
            # them there, cast to its dtype, with no trip through host memory)
            here = getattr(self.policy, "worker", None) is not None
            state = self.policy.call("full_state_dict", not here)[0]
            self.runner.run(self.engine.update_weights(state))
            self.bytes_last = sum(t.numel() * t.element_size() for t in state.values())
        elif self.backend == "checkpoint":
            self.bytes_last = int(self.policy.call("save_weights", self.sync_dir.path)[0])
            self.runner.run(self.engine.update_weights(self.sync_dir.path))
        else:
            self._broadcast()

    # -- sharing
    def _sharing_checks(self, method: str = "share_weights") -> Any:
        """The one engine that can take part (it has ``method``), or ``SharingUnavailable`` saying why not."""
        t = self.cfg.trainer
        if t.async_training.enabled:
            raise SharingUnavailable("async training generates while the policy updates, so the engine needs a copy")
        engines = engines_behind(self.engine)
        if len(engines) != 1:
            raise SharingUnavailable(f"{len(engines)} engines (one policy's tensors serve one engine)")
        if not hasattr(engines[0], method):
            doing = "read another model's tensors" if method == "share_weights" else "lend its weights"
            raise SharingUnavailable(f"{type(engines[0]).__name__} cannot {doing}")
        if getattr(self.policy, "world_size", 1) != 1:
            raise SharingUnavailable(f"the policy is sharded over {self.policy.world_size} FSDP ranks")
        return engines[0]

    def _share_in_process(self) -> None:
        engine = self._sharing_checks()
        worker = getattr(self.policy, "worker", None)
        if worker is None:
            raise SharingUnavailable("the policy runs in another process")
        tensors, why = worker.shareable_parameters()
        if tensors is None:
            raise SharingUnavailable(why)
        try:
            engine.share_weights(tensors)
        except ValueError as exc:
            raise SharingUnavailable(str(exc)) from None

    def _lend_in_process(self) -> None:
        """The engine lends the policy its own weights (``HFEngine.lend_weights``), which the policy keeps current
        and computes with (``TrainingWorker.borrow_weights``)."""
        engine = self._sharing_checks("lend_weights")
        worker = getattr(self.policy, "worker", None)
        if worker is None:
            raise SharingUnavailable("the policy runs in another process")
        if not hasattr(worker, "borrow_weights"):
            raise SharingUnavailable(f"{type(worker).__name__} cannot compute with an engine's weights")
        why = worker.borrowing_refusal()
        if why is not None:
            raise SharingUnavailable(why)
        try:
            loan = engine.lend_weights()
        except ValueError as exc:  # lent or shared already: someone else's loan stays as it is
            raise SharingUnavailable(str(exc)) from None
        try:
            worker.borrow_weights(loan)
        except ValueError as exc:
            engine.recall_weights()
            raise SharingUnavailable(f"the policy cannot compute with the engine's weights: {exc}") from None
        engine.weights_changed()

    def _share_through_file(self) -> None:
        engine = self._sharing_checks()
        if getattr(self.policy, "worker", None) is not None:
            raise SharingUnavailable("the policy runs in this process (use inprocess)")
        import ray

        here = ray.get_runtime_context().get_node_id()
        if self.policy.call("node_id")[0] != here:
            raise SharingUnavailable("the policy runs on another node")
        dtype = getattr(engine, "weight_dtype", None)
        path = os.path.join(shared_memory_dir(), f"skyrl-weights-{uuid.uuid4().hex}")
        try:
            info, why = self.policy.call("share_parameters_in_file", path, dtype_name(dtype) if dtype else None)[0]
            if info is None:
                raise SharingUnavailable(why)
            tensors = map_shared_file(info)
        finally:
            if os.path.exists(path):
                os.unlink(path)  # both sides hold the pages mapped; nothing is left behind in /dev/shm
        try:
            engine.share_weights(tensors)
        except ValueError as exc:
            raise SharingUnavailable(str(exc)) from None

    def _check_still_held(self) -> None:
        """The engine still reads the policy's tensors (shared) or the ones the policy writes (lent): tell it
        they changed."""
        engine = engines_behind(self.engine)[0]
        if self.shared and not engine.shares_weights():
            raise RuntimeError("weight sync: the engine no longer shares the policy's tensors (were they replaced?)")
        engine.weights_changed()

    # -- broadcast
    def _connect_broadcast(self) -> None:
        actors = actor_engines(self.engine)
        if actors:
            self._connect_actors(actors)
            return
        if self.backend == "nccl" and self.policy.call("cuda_device_uuid")[0] == cuda_device_uuid():
            why = "policy rank 0 runs on this process's GPU, and NCCL refuses two ranks on one GPU"
            if self.cfg.generator.weight_sync_backend == "nccl":
                raise RuntimeError(f"generator.weight_sync_backend=nccl: {why}; use auto or gloo")
            self.backend, self.fallback_reason = "gloo", why
            logger.info("weight sync: gloo broadcast (%s)", why)
        host, port = "127.0.0.1", free_port()
        self.receiver = WeightReceiver(self.backend, host, port, rank=1, world_size=2)  # type: ignore[arg-type]
        self._call_policy_async("connect_weight_broadcast", self.backend, host, port, 2)
        self.receiver.connect()
        self._wait_policy()

    def _connect_actors(self, actors: List[Any]) -> None:
        """Policy rank 0 hosts the group on its node's IP and a port free there (not 127.0.0.1: the actors may run
        on other nodes); every engine actor joins as one more rank."""
        host, port = self.policy.call("rendezvous_address")[0]
        world = 1 + len(actors)
        joining = [actor.connect_weight_receiver(self.backend, host, port, rank, world)
                   for rank, actor in enumerate(actors, start=1)]
        hosting = self.policy.call_async("connect_weight_broadcast", self.backend, host, port, world)
        self._await_actors(actors, joining, hosting, "joining the weight broadcast")
        self._actors = actors
        self.rendezvous = f"{host}:{port}"

    def _broadcast_to_actors(self) -> None:
        import ray

        dtype = engine_dtype(self.engine)
        receiving = [actor.receive_weights() for actor in self._actors]  # started before rank 0 sends
        sending = self.policy.call_async("broadcast_weights", dtype_name(dtype) if dtype else None)
        self._await_actors(self._actors, receiving, sending, "receiving the weights")
        self.bytes_last = int(ray.get(sending)[0])

    def _await_actors(self, actors: List[Any], engine_refs: List[Any], policy_refs: List[Any], doing: str) -> None:
        """Wait for both sides of a collective between policy rank 0 and the engine actors. An actor that fails or
        dies stops the sync at once, naming its index and node; the policy's side cannot finish without it, so its
        workers are ended too (otherwise rank 0 would wait out the group's timeout)."""
        import ray

        pending = engine_refs + policy_refs
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            try:
                ray.get(done[0])
            except Exception as exc:
                if done[0] not in engine_refs:
                    raise
                index = engine_refs.index(done[0])
                for worker in getattr(self.policy, "actors", []):
                    ray.kill(worker)
                cause = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                raise RuntimeError(
                    f"weight sync: engine actor {index} (node {getattr(actors[index], 'node_id', '?')}) failed while "
                    f"{doing}, so the broadcast cannot complete; the policy workers were stopped. Cause: "
                    f"{type(exc).__name__}: {cause}"
                ) from exc

    def _broadcast(self) -> None:
        if self._actors:
            self._broadcast_to_actors()
            return
        assert self.receiver is not None
        received: Dict[str, Any] = {}

        def receive() -> None:
            try:
                received["pairs"] = self.receiver.receive()  # type: ignore[union-attr]
            except BaseException as exc:  # re-raised below
                received["error"] = exc

        thread = threading.Thread(target=receive, name="skyrl-weight-receive")
        thread.start()
        dtype = engine_dtype(self.engine)
        sizes = self.policy.call("broadcast_weights", dtype_name(dtype) if dtype else None)
        thread.join()
        if "error" in received:
            raise received["error"]
        self.bytes_last = int(sizes[0])
        self.runner.run(self.engine.update_weights(received["pairs"]))

    def _call_policy_async(self, method: str, *args: Any) -> None:
        result: List[Any] = []
        self._pending = threading.Thread(target=lambda: result.append(self.policy.call(method, *args)))
        self._pending.start()

    def _wait_policy(self) -> None:
        self._pending.join()
