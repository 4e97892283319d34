"""veRL adapter: run ``skyrl_gym`` envs in veRL's multi-turn rollout and score rows with them.

* :mod:`skygym_adapters.verl.rows` -- dataset rows <-> veRL Parquet rows (no veRL import);
* :mod:`skygym_adapters.verl.reward` -- ``compute_score`` for ``reward.custom_reward_function`` (no veRL import);
* :mod:`skygym_adapters.verl.agent_loop` -- ``SkyRLGymAgentLoop``, registered as ``skyrl_gym_agent`` (imports veRL);
* :mod:`skygym_adapters.verl.server` -- veRL's server-manager interface over this project's inference engines;
* :mod:`skygym_adapters.verl.local` -- veRL's config, dataset, agent-loop and reward workers in one process.

Importing this package imports nothing from veRL; see docs/adapters.md.
"""

from skygym_adapters.verl.rows import AGENT_NAME, read_verl_parquet, row_to_verl, rows_to_verl, verl_to_row, write_verl_parquet

__all__ = ["AGENT_NAME", "read_verl_parquet", "row_to_verl", "rows_to_verl", "verl_to_row", "write_verl_parquet"]
