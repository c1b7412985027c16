"""Environments: episodes of one or more turns between the policy and a task (tools, feedback, ...).

Importing this package registers the built-in environments in :data:`ENVIRONMENTS`:
``single_turn`` (a task plus ``reward.verifier``, the default), ``tools`` (calculator /
sandboxed Python tool use), ``search`` (BM25 retrieval over a local corpus), ``retry`` ("try again" feedback),
``agent`` (an agent using the policy through an OpenAI-compatible endpoint, :mod:`rlvr.envs.agent`),
``verifiers`` and ``openenv`` (adapters to those ecosystems) and ``code_feedback`` (a failing function
is answered with the failing test or error).  Procedural tasks
(reasoning-gym datasets) are tasks (``task.name=reasoning_gym``) scored by their own
verifier; the live curriculum is :mod:`rlvr.tasks.curriculum`.
"""

from rlvr.envs.base import (ENVIRONMENTS, Environment, EpisodeState, Limits, Reply, build_environment, multi_turn,
                            EnvTraits, environment_traits, set_concurrency)
from rlvr.envs import code_feedback as _code, retry as _retry, single_turn as _single, tool_env as _tools  # noqa: F401,E402,E501 (register)
from rlvr.envs import retrieval as _retrieval  # noqa: F401,E402 (registers env.name=search)
from rlvr.envs import openenv_env as _openenv, verifiers_env as _verifiers  # noqa: F401,E402 (register; their packages load lazily)
from rlvr.envs import agent as _agent  # noqa: F401,E402 (registers env.name=agent; the endpoint loads lazily)
from rlvr.envs.single_turn import SingleTurnEnvironment
from rlvr.envs.tools import Tool, ToolBox, calculator, parse_tool_call, python_tool

__all__ = ["ENVIRONMENTS", "Environment", "EpisodeState", "Limits", "Reply", "build_environment", "multi_turn",
           "EnvTraits", "environment_traits", "set_concurrency",
           "SingleTurnEnvironment", "Tool", "ToolBox", "calculator", "parse_tool_call", "python_tool"]
