"""Run veRL's own rollout machinery in this process: config, dataset, agent-loop worker, reward worker.

veRL normally runs its agent-loop and reward workers as Ray actors next to vLLM servers. Both worker
classes are plain Python classes that Ray wraps, so they also run in-process, served by
:class:`skygym_adapters.verl.server.EngineServerManager`. The tests and the conformance kit use this to drive
veRL's real code on a CPU; users can use it to debug a dataset and env before launching a cluster run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, List, Optional, Sequence, Union


def compose_config(
    model_path: Union[str, Path],
    overrides: Sequence[str] = (),
    config_dir: Optional[Union[str, Path]] = None,
    config_name: str = "ppo_trainer",
) -> Any:
    """veRL's trainer config with ``actor_rollout_ref.model.path`` and overrides, as ``main_ppo`` would see it.

    By default veRL's own ``ppo_trainer.yaml``; ``config_dir``/``config_name`` load a config that extends it
    (such as ``examples/verl/gsm8k_multi_turn.yaml``, which puts ``pkg://verl.trainer.config`` on its search path).
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    import verl.trainer.config as verl_config_pkg

    from verl.experimental.reward_loop import migrate_legacy_reward_impl

    directory = str(Path(config_dir).resolve()) if config_dir else os.path.dirname(os.path.abspath(verl_config_pkg.__file__))
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=directory, version_base=None):
        config = compose(
            config_name=config_name,
            overrides=[f"actor_rollout_ref.model.path={model_path}", *overrides],
        )
    return migrate_legacy_reward_impl(config)


def load_batch(parquet_files: Union[str, Path, Iterable[Union[str, Path]]], config: Any, tokenizer: Any) -> Any:
    """A ``DataProto`` of every row in the files, read by veRL's ``RLHFDataset`` and its ``collate_fn``."""
    from verl.protocol import DataProto
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    files = [str(parquet_files)] if isinstance(parquet_files, (str, Path)) else [str(f) for f in parquet_files]
    dataset = RLHFDataset(data_files=files, tokenizer=tokenizer, config=config.data, processor=None)
    batch = collate_fn([dataset[i] for i in range(len(dataset))])
    return DataProto.from_single_dict(batch)


async def generate_sequences(config: Any, server_manager: Any, batch: Any) -> Any:
    """veRL's ``AgentLoopWorker.generate_sequences`` on ``batch``, in this process, through ``server_manager``."""
    import skygym_adapters.verl.agent_loop  # noqa: F401  registers skyrl_gym_agent in veRL's registry
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    worker = AgentLoopWorker(config, server_manager)
    return await worker.generate_sequences(batch)


async def compute_rewards(config: Any, batch: Any) -> List[dict]:
    """veRL's ``RewardLoopWorker`` (the path of ``reward.custom_reward_function``) over ``batch``, in-process."""
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    worker = RewardLoopWorker(config)
    return await worker.compute_score_batch(batch)


__all__ = ["compose_config", "load_batch", "generate_sequences", "compute_rewards"]
