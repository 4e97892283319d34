"""Train on the tutorial's multiply env with the bundled trainer (SkyRL-train's tutorial, ``skygym_train`` names).

    python -m examples.multiply_tutorial.main_multiply data.train_data="['~/data/multiply/train.parquet']" ...

``hydra_main`` is ``hydra.main`` when Hydra is installed; without Hydra it reads the same ``key=value``
overrides with skygym_train's loader (see README.md).
"""

import ray

from skygym_train.entrypoints.main_base import BasePPOExp, config_dir, hydra_main, validate_cfg
from skygym_train.utils import initialize_ray
from skyrl_gym.envs import deregister, register


@ray.remote(num_cpus=1)
def skyrl_entrypoint(cfg):
    # Register the env inside the Ray task that trains (no change to any installed package). `multiply` is also
    # a shipped id: deregistering it first says that this run replaces it on purpose.
    deregister("multiply")
    register(id="multiply", entry_point="examples.multiply_tutorial.env:MultiplyEnv")
    exp = BasePPOExp(cfg)
    return exp.run()["global_step"]


@hydra_main(config_path=config_dir, config_name="ppo_base_config", version_base=None)
def main(cfg) -> None:
    validate_cfg(cfg)  # every problem, with its key, before anything starts
    initialize_ray(cfg)
    steps = ray.get(skyrl_entrypoint.remote(cfg))
    print(f"trained {steps} steps")


if __name__ == "__main__":
    main()
