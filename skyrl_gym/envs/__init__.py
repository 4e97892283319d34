"""Registers the built-in envs. Entry points are strings: nothing is imported until ``make``.

Keep one ``register`` call per env, grouped by family; ids match SkyRL-gym's where it has them.
"""

from skyrl_gym.registration import deregister, register

# --- math ---------------------------------------------------------------------------------------
register(id="gsm8k", entry_point="skyrl_gym.envs.gsm8k.env:GSM8kEnv")
register(id="gsm8k_multi_turn", entry_point="skyrl_gym.envs.gsm8k.multi_turn_env:GSM8kMultiTurnEnv")
register(id="aime", entry_point="skyrl_gym.envs.aime.env:AIMEEnv")
register(id="math", entry_point="skyrl_gym.envs.math.env:MathEnv")
register(id="multiply", entry_point="skyrl_gym.envs.multiply.env:MultiplyEnv")

# --- tools: SQL, search (issue: tool environments) ------------------------------------------------
register(id="text2sql", entry_point="skyrl_gym.envs.sql.env:SQLEnv")
register(id="sql", entry_point="skyrl_gym.envs.sql.env:SQLEnv")
register(id="search", entry_point="skyrl_gym.envs.search.env:SearchEnv")
register(id="searchcode", entry_point="skyrl_gym.envs.searchcode.env:SearchCodeEnv")

# --- code (issue: sandboxes) ----------------------------------------------------------------------
register(id="lcb", entry_point="skyrl_gym.envs.lcb.env:LCBEnv")
register(id="humaneval", entry_point="skyrl_gym.envs.humaneval.env:HumanEvalEnv")
register(id="code_interpreter", entry_point="skyrl_gym.envs.code_interpreter.env:CodeInterpreterEnv")

__all__ = ["register", "deregister"]
