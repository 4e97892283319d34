"""Registers the built-in envs and their dataset builders. Entry points are strings: nothing is imported
until ``make`` (or ``skyrl_gym.datasets.build_rows``).

Keep one ``register`` call per env, grouped by family, with its ``register_dataset`` beside it when the
env has a dataset builder; ids match SkyRL-gym's where it has them.
"""

from skyrl_gym.datasets import register_dataset
from skyrl_gym.registration import deregister, register

# --- math ---------------------------------------------------------------------------------------
register(id="gsm8k", entry_point="skyrl_gym.envs.gsm8k.env:GSM8kEnv")
register_dataset("gsm8k", "skyrl_gym.envs.gsm8k.dataset:build_rows")
register(id="gsm8k_multi_turn", entry_point="skyrl_gym.envs.gsm8k.multi_turn_env:GSM8kMultiTurnEnv")
register_dataset("gsm8k_multi_turn", "skyrl_gym.envs.gsm8k.dataset:build_multi_turn_rows")
register(id="aime", entry_point="skyrl_gym.envs.aime.env:AIMEEnv")
register(id="math", entry_point="skyrl_gym.envs.math.env:MathEnv")
register(id="multiply", entry_point="skyrl_gym.envs.multiply.env:MultiplyEnv")
register_dataset("multiply", "skyrl_gym.envs.multiply.dataset:build_rows")

# --- tools: SQL, search (issue: tool environments) ------------------------------------------------
register(id="text2sql", entry_point="skyrl_gym.envs.sql.env:SQLEnv")
register_dataset("text2sql", "skyrl_gym.envs.sql.dataset:build_rows")
register(id="sql", entry_point="skyrl_gym.envs.sql.env:SQLEnv")
register_dataset("sql", "skyrl_gym.envs.sql.dataset:build_rows")
register(id="search", entry_point="skyrl_gym.envs.search.env:SearchEnv")
register(id="searchcode", entry_point="skyrl_gym.envs.searchcode.env:SearchCodeEnv")

# --- code (issue: sandboxes) ----------------------------------------------------------------------
register(id="lcb", entry_point="skyrl_gym.envs.lcb.env:LCBEnv")
register_dataset("lcb", "skyrl_gym.envs.lcb.dataset:build_rows")
register(id="humaneval", entry_point="skyrl_gym.envs.humaneval.env:HumanEvalEnv",
         description="The 164 HumanEval problems: 1.0 when the completed function passes its tests in a sandbox.")
register_dataset("humaneval", "skyrl_gym.envs.humaneval.dataset:build_rows")
register(id="code_interpreter", entry_point="skyrl_gym.envs.code_interpreter.env:CodeInterpreterEnv",
         description="Math with a sandboxed Python tool over several turns; 1.0 for a correct \\boxed{} answer.")

# --- software engineering (issue: SWE tasks in docker sandboxes) -------------------------------------
register(id="swe", entry_point="skyrl_gym.envs.swe.env:SWEEnv",
         description="Fix a bug in a real repository in a container (bash, editor, submit); 1.0 iff SWE-bench's resolved rule holds.")
register_dataset("swe", "skyrl_gym.envs.swe.dataset:build_rows")

__all__ = ["register", "deregister"]
