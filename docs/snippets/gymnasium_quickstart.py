import gymnasium
import skyrl_gym  # registers every env with Gymnasium as skyrl_gym/<id>-v0 (importing Gymnasium lazily)
from skyrl_gym.datasets import build_rows

rows = build_rows("multiply", split="test", size=8, seed=0)  # or a JSONL/JSON/Parquet file of rows
env = gymnasium.make("skyrl_gym/multiply-v0", rows=rows)
obs, info = env.reset(seed=0)  # a row sampled with the seed
obs, info = env.reset(options={"index": 0})  # or row 0 of `rows` (or options={"row": {...}})
answer = rows[0]["reward_spec"]["ground_truth"]
obs, reward, terminated, truncated, info = env.step(rf"\boxed{{{answer}}}")
print(reward, terminated, truncated)  # 1.0 True False
