"""A second device on a CPU-only machine, for tests that code follows the device of its data.

On a GPU, a tensor made without ``device=`` lands on the CPU and the first op that meets it with a CUDA tensor
fails (``index_select`` with a CPU index on CUDA logits was the trainer's first GPU crash). On a CPU-only
machine every tensor is on the CPU, so such code passes every test. Inside :func:`emulated_device` a tensor on
the ``meta`` device is a real CPU tensor in disguise (:class:`OnDevice`): it computes real values (losses,
gradients, ``float()`` all work) but reports ``device='meta'``, and an op that mixes it with a plain CPU
tensor raises :class:`DeviceMismatch` as CUDA would. What CUDA accepts is accepted: 0-dim CPU tensors beside
device tensors, CPU index tensors in advanced indexing, ``copy_`` and ``.to()`` across devices.

Code under test picks the device as it would pick ``cuda``: ``model.to(torch.device("meta"))``,
``torch.zeros(..., device=x.device)``, ``torch.tensor(data, device="meta")``.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

DEVICE = torch.device("meta")
"""The emulated device."""

_aten = torch.ops.aten
# ops CUDA runs with CPU tensors among their arguments
_MIXED_OK = {
    _aten.copy_.default,
    _aten.index.Tensor,
    _aten.index_put_.default,
    _aten.index_put.default,
    _aten._index_put_impl_.default,
    _aten._to_copy.default,
}

_INDEXING = {_aten.index.Tensor, _aten.index_put_.default, _aten.index_put.default, _aten._index_put_impl_.default}


TRANSFERS = {"to_host": 0, "to_device": 0}
"""Bytes copied between the host and the emulated device since :func:`emulated_device` began."""

READS = {"scalars": 0}
"""Single values read from the emulated device since :func:`emulated_device` began (``float()``, ``.item()``,
``bool()``, ``int()``): on CUDA each such read waits for every queued kernel."""


class DeviceMismatch(RuntimeError):
    """An op met a tensor on the emulated device and a (non-scalar) CPU tensor: on CUDA this op would fail."""


class OnDevice(torch.Tensor):
    """A CPU tensor (``_data``) that says it lives on :data:`DEVICE`."""

    _data: torch.Tensor

    @staticmethod
    def __new__(cls, data: torch.Tensor) -> "OnDevice":
        t = torch.Tensor._make_wrapper_subclass(
            cls, data.shape, strides=data.stride(), storage_offset=data.storage_offset(), dtype=data.dtype,
            device=DEVICE, requires_grad=data.requires_grad,
        )
        t._data = data
        return t

    __torch_function__ = torch._C._disabled_torch_function_impl

    # What lives in Python (``_data``) and not in the tensor's C++ part, passed on as a CUDA tensor would pass on
    # its storage: where two tensors read one storage (``data_ptr``), and ``param.data = tensor`` (which makes
    # ``param`` read ``tensor``'s storage: an engine sharing a policy's weights)
    def data_ptr(self) -> int:  # type: ignore[override]
        return self._data.data_ptr()

    @property
    def data(self) -> torch.Tensor:  # type: ignore[override]
        return torch._C.TensorBase.data.__get__(self)

    @data.setter
    def data(self, value: torch.Tensor) -> None:
        if not isinstance(value, OnDevice):
            raise DeviceMismatch(f"the emulation cannot move a tensor on {DEVICE.type} to {value.device} by .data =")
        torch._C.TensorBase.data.__set__(self, value)
        self._data = value._data

    def __repr__(self) -> str:  # type: ignore[override]
        return f"OnDevice({self._data!r})"

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return _run(func, args, kwargs)  # outside emulated_device(), as inside


def _on_device(device: Any) -> bool:
    return device is not None and torch.device(device).type == DEVICE.type


def _run(func: Any, args: Any, kwargs: Any) -> Any:
    """Run ``func`` on the CPU tensors behind its arguments, refusing what CUDA refuses."""
    kwargs = dict(kwargs or {})
    seen = set()

    def unwrap(x: Any) -> Any:
        if isinstance(x, OnDevice):
            seen.add("device")
            return x._data
        if isinstance(x, torch.Tensor):
            if x.device.type == DEVICE.type:
                raise DeviceMismatch(f"{func}: a real {DEVICE.type} tensor (made outside the emulation)")
            if x.dim() > 0:
                seen.add("cpu")
        return x

    args_, kwargs_ = pytree.tree_map(unwrap, (args, kwargs))
    if seen == {"device", "cpu"} and func not in _MIXED_OK:
        raise DeviceMismatch(f"{func}: tensors on {DEVICE.type} (standing for a GPU) and on cpu")
    if func in _INDEXING and not isinstance(args[0], OnDevice) and isinstance(args[0], torch.Tensor) and args[0].dim():
        if any(isinstance(i, OnDevice) for i in pytree.tree_leaves(args[1:])):  # CUDA takes a CPU index, not this
            raise DeviceMismatch(f"{func}: a cpu tensor indexed with (or given) tensors on {DEVICE.type}")
    target = kwargs_.get("device")
    if target is not None:
        kwargs_["device"] = torch.device("cpu")
    elif func is _aten.to.device:  # ``x.to(device, dtype)``: the device is positional
        target, args_ = args_[1], (args_[0], torch.device("cpu"), *args_[2:])
    out = func(*args_, **kwargs_)
    if func is _aten.copy_.default:
        _count(args[1], args[0], args_[1])
        return args[0]
    if func in (_aten._to_copy.default, _aten.to.device) and target is not None:
        _count(args[0], DEVICE if _on_device(target) else torch.device("cpu"), out)
    if func is _aten._local_scalar_dense.default:
        READS["scalars"] += "device" in seen
        return out
    if _on_device(target) or (target is None and "device" in seen):
        return pytree.tree_map_only(torch.Tensor, OnDevice, out)
    return out


def _count(source: Any, destination: Any, data: torch.Tensor) -> None:
    """Add a copy from ``source`` to ``destination`` (tensors or devices) to :data:`TRANSFERS`."""
    on = [isinstance(x, OnDevice) or (isinstance(x, torch.device) and x.type == DEVICE.type)
          for x in (source, destination)]
    if on[0] != on[1]:
        TRANSFERS["to_device" if on[1] else "to_host"] += data.numel() * data.element_size()


class _Dispatch(TorchDispatchMode):
    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return _run(func, args, kwargs)


class _Factories(TorchFunctionMode):
    """``torch.tensor(data, device=DEVICE)`` and friends copy their data on the host, below dispatch."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        if func in (torch.tensor, torch.as_tensor, torch.asarray) and _on_device(kwargs.get("device")):
            kwargs["device"] = "cpu"
            return OnDevice(func(*args, **kwargs))
        if func is torch.Tensor.tolist and isinstance(args[0], OnDevice):  # a read to the host, as on CUDA
            _count(args[0], torch.device("cpu"), args[0]._data)
            return args[0]._data.tolist()
        if func in (torch.Tensor.__getitem__, torch.Tensor.__setitem__) and isinstance(args[0], OnDevice):
            # a list index becomes a tensor on the indexed tensor's device below dispatch; CUDA takes a CPU
            # one too
            index = args[1]
            listed = isinstance(index, tuple) and any(isinstance(i, list) for i in index)
            if isinstance(index, list) or listed:
                index = torch.as_tensor(index) if isinstance(index, list) else tuple(
                    torch.as_tensor(i) if isinstance(i, list) else i for i in index)
                args = (args[0], index, *args[2:])
        return func(*args, **kwargs)


@contextlib.contextmanager
def emulated_device(threads: bool = False) -> Iterator[torch.device]:
    """Within: :data:`DEVICE` stands for a GPU (see the module docstring). Yields the device.

    The emulation is a pair of torch modes, which hold for the thread that entered them. With ``threads``, every
    thread started within runs under modes of its own too (an engine decodes in a worker thread, a trainer runs its
    event loop in another), and ``torch.inference_mode`` is ``torch.no_grad`` (a wrapper tensor cannot make views
    of inference tensors)."""
    swap = torch.__future__.get_swap_module_params_on_conversion()
    # Module.to() swaps each parameter's contents in place (as it keeps a CUDA parameter object): tied
    # weights stay one parameter
    torch.__future__.set_swap_module_params_on_conversion(True)
    TRANSFERS.update(to_host=0, to_device=0)
    READS.update(scalars=0)
    run, inference_mode = threading.Thread.run, torch.inference_mode

    def run_emulated(thread: threading.Thread) -> None:
        with _Factories(), _Dispatch():
            run(thread)

    if threads:
        threading.Thread.run, torch.inference_mode = run_emulated, torch.no_grad  # type: ignore[method-assign]
    try:
        with _Factories(), _Dispatch():
            yield DEVICE
    finally:
        threading.Thread.run, torch.inference_mode = run, inference_mode  # type: ignore[method-assign]
        torch.__future__.set_swap_module_params_on_conversion(swap)


def on_device(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` on the emulated device (inside :func:`emulated_device`)."""
    return tensor.to(DEVICE)


def is_on_device(tensor: Any) -> bool:
    return isinstance(tensor, OnDevice)
