"""The agent layer: SkyAgent's concepts (runner, trajectories, agents, tasks, dispatchers, backends) on the hub.

A SkyAgent script ports by changing its imports::

    from skygym_adapters.agents import AutoAgentRunner   # was: from skyrl_agent import AutoAgentRunner

    runner = AutoAgentRunner.from_task("agent.yaml", infer_engine=engine, tokenizer=tokenizer)
    output = await runner.run(batch, val_mode=False)

``task: env`` makes any registered env an agent task; ``task: swe_bench`` runs SWE-bench-format instances in
containers; every env-shaped flow runs through the one episode
driver (:func:`skyrl_gym.episode.run_episode`). See docs/agents.md.
"""

from skygym_adapters.agents.agents import (
    AgentRun,
    CodeActAgent,
    ReActAgent,
    ReActChatPolicy,
    finish_reason_of,
)
from skygym_adapters.agents.backends import (
    BACKEND_REGISTRY,
    ChatReply,
    OpenAIChatBackend,
    TokenBackend,
    build_backend,
    register_backend,
)
from skygym_adapters.agents.config import AgentConfig, AgentConfigError, load_agent_config, parse_agent_config
from skygym_adapters.agents.dispatchers import DISPATCHER_REGISTRY, register_dispatcher
from skygym_adapters.agents.runner import (
    AGENT_REGISTRY,
    AgentRunner,
    AutoAgentRunner,
    register_agent,
    summarize_results,
)
from skygym_adapters.agents.tasks import TASK_REGISTRY, BaseTask, EnvTask, GeneralReactTask, register_task
from skygym_adapters.agents.swe import SWEAgentEnv, SWEBenchTask
from skygym_adapters.agents.tools import (
    TOOL_REGISTRY,
    AgentToolEnv,
    CodeActToolEnv,
    CodeInterpreterTool,
    FinishTool,
    register_tool,
)
from skygym_adapters.agents.trajectory import (
    BaseTrajectory,
    ReActTrajectory,
    TrajectoryConfig,
    TrajectoryResult,
)

__all__ = [
    "AGENT_REGISTRY",
    "AgentConfig",
    "CodeActAgent",
    "CodeActToolEnv",
    "AgentConfigError",
    "AgentRun",
    "AgentRunner",
    "AgentToolEnv",
    "AutoAgentRunner",
    "BACKEND_REGISTRY",
    "BaseTask",
    "BaseTrajectory",
    "ChatReply",
    "CodeInterpreterTool",
    "DISPATCHER_REGISTRY",
    "EnvTask",
    "FinishTool",
    "GeneralReactTask",
    "OpenAIChatBackend",
    "ReActAgent",
    "ReActChatPolicy",
    "ReActTrajectory",
    "SWEAgentEnv",
    "SWEBenchTask",
    "TASK_REGISTRY",
    "TOOL_REGISTRY",
    "TokenBackend",
    "TrajectoryConfig",
    "TrajectoryResult",
    "build_backend",
    "finish_reason_of",
    "load_agent_config",
    "parse_agent_config",
    "register_agent",
    "register_backend",
    "register_dispatcher",
    "register_task",
    "register_tool",
    "summarize_results",
]
