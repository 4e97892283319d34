"""Next-token sampling for :class:`~skygym_adapters.engines.hf.HFEngine`, entirely on the logits' device.

Randomness comes in as one uniform number per row and step, drawn before decoding starts (:func:`draw_uniforms`):
a seeded row draws its numbers from its own CPU generator, so its tokens depend on its seed only (not on the batch it
shares, the device or how often the host looks at the results), and all rows' numbers reach the device in one copy.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

from skygym_adapters.engines.base import ResolvedSampling


def draw_uniforms(seeds: Sequence[Optional[int]], steps: int, device: Any) -> Any:
    """``(rows, steps)`` uniform numbers in [0, 1) on ``device``: row ``i`` from
    ``torch.Generator().manual_seed(seeds[i])`` (the global CPU generator where the seed is None), moved to the
    device in one copy."""
    import torch

    uniforms = torch.empty((len(seeds), steps), dtype=torch.float32)
    for row, seed in enumerate(seeds):
        generator = None if seed is None else torch.Generator(device="cpu").manual_seed(int(seed))
        torch.rand(steps, generator=generator, out=uniforms[row])
    return uniforms.to(device, non_blocking=True)


def filtered_logits(scaled: Any, sampling: ResolvedSampling) -> Any:
    """The temperature-scaled logits with what top-k, min-p and top-p exclude set to -inf (a new tensor only when
    something filters)."""
    import torch

    top_k = sampling.top_k if sampling.top_k and sampling.top_k > 0 else 0
    if not top_k and sampling.min_p <= 0 and sampling.top_p >= 1.0:
        return scaled
    filtered = scaled.clone()
    if top_k:
        kth = torch.topk(filtered, min(top_k, filtered.shape[-1]), dim=-1).values[:, -1:]
        filtered.masked_fill_(filtered < kth, float("-inf"))
    if sampling.min_p > 0:
        probs = torch.softmax(filtered, dim=-1)
        threshold = probs.max(dim=-1, keepdim=True).values * sampling.min_p
        filtered.masked_fill_(probs < threshold, float("-inf"))
    if sampling.top_p < 1.0:
        sorted_logits, order = torch.sort(filtered, descending=True, dim=-1)
        sorted_probs = torch.softmax(sorted_logits, dim=-1)
        # Drop a token when the tokens ranked above it already hold top_p of the mass (the first always stays).
        remove = sorted_probs.cumsum(dim=-1) - sorted_probs > sampling.top_p
        sorted_logits.masked_fill_(remove, float("-inf"))
        filtered = torch.full_like(filtered, float("-inf")).scatter_(-1, order, sorted_logits)
    return filtered


def sample_tokens(logits: Any, sampling: ResolvedSampling, uniform: Any) -> Tuple[Any, Any]:
    """Pick one token per row of ``logits`` (``(rows, vocab)``, float32) and return ``(tokens, logprobs)`` on the
    logits' device: the logprob of each token under ``log_softmax(logits / temperature)`` (what a trainer recomputes),
    not under the filtered distribution. ``uniform`` (``(rows,)``, same device) drives the draw: an inverse-CDF search,
    exact, and one uniform per row whatever the vocabulary size. Temperature 0 is greedy (``uniform`` unused)."""
    import torch

    if sampling.temperature == 0:
        tokens = logits.argmax(dim=-1)
        logprob_all = torch.log_softmax(logits, dim=-1)
        return tokens, logprob_all.gather(-1, tokens[:, None]).squeeze(-1)
    scaled = logits / sampling.temperature
    logprob_all = torch.log_softmax(scaled, dim=-1)
    filtered = filtered_logits(scaled, sampling)
    probs = logprob_all.exp() if filtered is scaled else torch.softmax(filtered, dim=-1)
    cdf = probs.cumsum(dim=-1)
    # right=True: the first token whose cdf exceeds the draw, so a zero-probability token is never picked; scaling by
    # the last cdf value absorbs rounding in the sum.
    target = (uniform.to(cdf.dtype)[:, None] * cdf[:, -1:]).contiguous()
    tokens = torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp_(max=probs.shape[-1] - 1)
    return tokens, logprob_all.gather(-1, tokens[:, None]).squeeze(-1)


__all__ = ["draw_uniforms", "filtered_logits", "sample_tokens"]
