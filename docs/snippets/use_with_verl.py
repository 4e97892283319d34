# Use with veRL: rows as veRL Parquet (agent_name picks our agent loop, env_class the env), and the
# reward function veRL calls for rows its own loops rolled out.
import os

from skygym_adapters.verl.reward import compute_score
from skygym_adapters.verl.rows import read_verl_parquet, write_verl_parquet
from skyrl_gym.datasets import build_rows

GSM8K = os.environ.get("GSM8K_JSONL")  # a local GSM8K JSONL file; None reads the hub
rows = build_rows("gsm8k_multi_turn", size=8, source=GSM8K)
path = write_verl_parquet(rows, "data/gsm8k_multi_turn/train.parquet")
assert read_verl_parquet(path) == rows  # the conversion loses nothing

print(compute_score(data_source="openai/gsm8k", solution_str="... #### 18", ground_truth="18", extra_info={}))  # 1.0
