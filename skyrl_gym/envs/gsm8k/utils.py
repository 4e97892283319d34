"""SkyRL-gym's import path for the GSM8K scorer; it lives in :mod:`skyrl_gym.rewards.gsm8k`."""

from skyrl_gym.rewards.gsm8k import compute_score, extract_solution  # noqa: F401
