"""The policy computing with its engine's weights: one bf16 copy of the model on the device, not two.

On one GPU the policy keeps fp32 parameters and computes under bf16 autocast. Autocast casts each linear
layer's weight to bf16 in the forward pass, and autograd keeps those casts until the backward pass has used
them: a bf16 copy of the model is alive at the step's peak. An HF engine in the same process keeps a bf16 copy
of its own to decode with. Between two optimizer steps the two hold the same values: the engine's is the cast
the weight sync made of the parameters after the last step, autocast's is that same cast.

So the policy borrows the engine's tensors (``HFEngine.lend_weights``, arranged by ``weight_sync``):

- after each optimizer step (and a checkpoint load) it writes its parameters into them, cast on the device:
  that write is the weight sync, done where the update happens, and the sync itself then moves nothing;
- its forward passes read every linear layer's weight and bias from them (``torch.func.functional_call``)
  through :class:`Borrowed`, whose backward pass hands the gradient to the fp32 parameter as autocast's cast
  does. Autocast finds bf16 weights and casts nothing. Values and gradients are bitwise those of autocast's
  casts (``tests/skygym_train/workers/test_borrowed_weights.py``).

The other parameters (embeddings, norms) are written too, since the engine decodes with them, but the policy
computes with its fp32 ones, as under autocast.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Tuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class Borrowed(torch.autograd.Function):
    """``lent[0]`` (the engine's bf16 copy of ``param``) in the forward pass; the gradient goes to ``param``, in
    its dtype. ``lent`` is a one-item list, so autograd does not take the engine's tensor for an input."""

    @staticmethod
    def forward(ctx: Any, param: torch.Tensor, lent: List[torch.Tensor]) -> torch.Tensor:
        ctx.param_dtype = param.dtype
        return lent[0].view_as(lent[0])

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[torch.Tensor, None]:
        return grad.to(ctx.param_dtype), None


def linear_parameter_names(model: torch.nn.Module) -> List[str]:
    """The names of the weights and biases of ``model``'s linear layers (tied ones under each module's name):
    the parameters autocast casts."""
    return [f"{module_name}.{name}" if module_name else name
            for module_name, module in model.named_modules(remove_duplicate=False)
            if isinstance(module, torch.nn.Linear)
            for name, param in module.named_parameters(recurse=False) if param is not None]


@dataclass
class BorrowedWeights:
    """An engine's tensors, one per parameter of a policy model, that the policy writes and computes with."""

    writes: List[Tuple[torch.Tensor, torch.Tensor]]
    """(the engine's tensor, the parameter written into it), once per distinct tensor."""
    compute: Dict[str, Tuple[torch.nn.Parameter, torch.Tensor]]
    """A linear layer's parameter name -> (the parameter, the engine's copy the forward pass reads)."""
    loan: Mapping[str, torch.Tensor]
    """What the engine handed out; its ``recalled`` turns true when the engine takes the tensors back."""

    @property
    def recalled(self) -> bool:
        """Whether the engine has taken its tensors back (``HFEngine.recall_weights``)."""
        return bool(getattr(self.loan, "recalled", False))

    @classmethod
    def check(cls, model: torch.nn.Module, tensors: Mapping[str, torch.Tensor], dtype: torch.dtype
              ) -> "BorrowedWeights":
        """Pair ``model``'s parameters with ``tensors`` by name; ``ValueError`` naming what does not match (a
        name either side lacks, a shape, dtype or device, a tie one side has and the other not)."""
        params = dict(model.named_parameters(remove_duplicate=False))
        problems = [f"{name}: the engine has no such parameter" for name in params if name not in tensors]
        problems += [f"{name}: the policy has no such parameter" for name in tensors if name not in params]
        for name, param in params.items():
            lent = tensors.get(name)
            if lent is not None and (tuple(lent.shape), lent.dtype, lent.device) != (
                    tuple(param.shape), dtype, param.device):
                problems.append(f"{name}: the engine's is {tuple(lent.shape)} {lent.dtype} on {lent.device}, the "
                                f"policy computes with {tuple(param.shape)} {dtype} on {param.device}")
        by_param: Dict[int, int] = {}
        for name, param in params.items():
            lent = tensors.get(name)
            if lent is not None and by_param.setdefault(id(param), lent.data_ptr()) != lent.data_ptr():
                problems.append(f"{name}: the policy ties it to another parameter, the engine does not")
        if len(set(by_param.values())) != len(by_param):
            problems.append("the engine ties parameters the policy keeps apart")
        if problems:
            more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
            raise ValueError("; ".join(problems[:3]) + more)
        writes, seen = [], set()
        for name, param in params.items():
            if id(param) not in seen:
                seen.add(id(param))
                writes.append((tensors[name], param))
        compute = {name: (params[name], tensors[name]) for name in linear_parameter_names(model)}
        return cls(writes, compute, tensors)

    @torch.no_grad()
    def write(self) -> None:
        """Copy the parameters into the engine's tensors, cast on their device."""
        for lent, param in self.writes:
            lent.copy_(param)

    def call(self, model: torch.nn.Module, **kwargs: Any) -> Any:
        """``model(**kwargs)`` with each linear layer reading the engine's copy of its weight and bias."""
        from torch.func import functional_call

        views = {name: Borrowed.apply(param, [lent]) for name, (param, lent) in self.compute.items()}
        # tie_weights=False: a tied LM head reads the bf16 copy, its embedding stays fp32 (as under autocast)
        return functional_call(model, views, (), kwargs, tie_weights=False, strict=False)


class WeightCasts(TorchDispatchMode):
    """Counts the casts of ``params``' memory to another dtype while active: ``casts``, their ``bytes`` and
    ``peak_bytes``, the most of them alive at once (autocast keeps a cast in its cache until the outermost autocast
    region ends, and autograd until the backward pass has used it). What autocast makes of the linear weights in a
    training step, and what borrowing leaves it nothing to make. For tests and ``bench/borrowed_weights.py``."""

    def __init__(self, params: Iterable[torch.Tensor]):
        super().__init__()
        self.pointers = {p.data_ptr() for p in params}
        self.casts = 0
        self.bytes = 0
        self.live_bytes = 0
        self.peak_bytes = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func is torch.ops.aten._to_copy.default and args[0].data_ptr() in self.pointers and (
                out.dtype != args[0].dtype):
            size = out.numel() * out.element_size()
            self.casts += 1
            self.bytes += size
            self.live_bytes += size
            self.peak_bytes = max(self.peak_bytes, self.live_bytes)
            weakref.finalize(out, self._died, size)
        return out

    def _died(self, size: int) -> None:
        self.live_bytes -= size
