"""Recursive Language Model (RLM) environments: the model works in a persistent Python REPL (run in a
sandbox) that holds its context, and may call language models from its code (``llm_query``,
``rlm_query``). :class:`BaseRLMEnv` is a base class: subclass it for a task (reward, prompt, tools)."""

from skyrl_gym.envs.rlm.env import BaseRLMEnv
from skyrl_gym.envs.rlm.repl import PersistentREPL, REPLResult, SandboxValue

__all__ = ["BaseRLMEnv", "PersistentREPL", "REPLResult", "SandboxValue"]
