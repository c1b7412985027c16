"""``task.name=verifiers``: the tasks of a `verifiers <https://github.com/PrimeIntellect-ai/verifiers>`_ taskset.

verifiers 0.4 (``verifiers.v1``) splits an environment into a *taskset* (an installed package
exporting a ``vf.Taskset`` subclass in ``__all__``: its ``load()`` yields ``vf.Task`` objects whose
``data`` carry ``prompt``, ``system_prompt`` and the task's own fields, and whose ``@vf.reward`` /
``@vf.metric`` methods score a finished trace) and an ``Env`` (how one task becomes one episode;
``SingleAgentEnv`` unless the taskset or ``env`` names another).  This task turns the taskset's
tasks into problems (system prompt, then the prompt); ``env.name=verifiers``
(:mod:`rlvr.envs.verifiers_env`) plays and scores them.  The package is an optional extra,
imported only here and in that environment: ``pip install 'rlvr[verifiers]'``.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from rlvr.types import Problem
from rlvr.utils.extras import require_extra

__all__ = ["INSTALL_HINT", "METADATA_KEY", "import_verifiers", "load_vf_env", "check_taskset", "task_messages",
           "verifiers_problems"]

INSTALL_HINT = "the verifiers adapter needs the verifiers package: pip install 'rlvr[verifiers]'"
METADATA_KEY = "verifiers"
"""``Problem.metadata[METADATA_KEY]``: which taskset (and env) a problem came from and its task's index."""


def import_verifiers():
    """``verifiers.v1`` (the 0.4 API), or ImportError with the one-line install hint."""
    return require_extra("verifiers.v1", INSTALL_HINT, cause=True)


def _spec(taskset: str, taskset_args: dict | None, env: str, env_args: dict | None) -> dict[str, Any]:
    return {"id": env or "", **dict(env_args or {}), "taskset": {"id": taskset, **dict(taskset_args or {})}}


def check_taskset(taskset: str, taskset_args: dict | None = None, env: str = "",
                  env_args: dict | None = None) -> None:
    """Raise ValueError (one line) when the package is missing, the taskset or env id is not installed, or
    their options do not validate; imports the plugins, loads no task."""
    try:
        vf = import_verifiers()
    except ImportError as e:
        raise ValueError(str(e)) from None
    if not taskset:
        raise ValueError("taskset: name the verifiers taskset to train on (an installed package id)")
    from verifiers.v1.utils.loaders import taskset_class

    try:
        taskset_class(taskset)
        if env:
            vf.environment_class(taskset, env)
        vf.resolve_env_config(_spec(taskset, taskset_args, env, env_args))
    except (ImportError, TypeError, AttributeError) as e:  # not installed, or exports no Taskset / Env
        raise ValueError(f"verifiers taskset {taskset!r}" + (f" / env {env!r}" if env else "") + ": "
                         + str(e).split("\n")[0]) from None
    except ValueError as e:  # pydantic: options that do not validate
        raise ValueError(f"verifiers taskset {taskset!r}: bad options: " + " ".join(str(e).split())[:400]) from None


class LoadedEnv:
    """A loaded verifiers ``Env`` and its taskset's tasks (in ``load()`` order)."""

    def __init__(self, env, tasks: list):
        self.env, self.tasks = env, tasks


@functools.lru_cache(maxsize=8)
def _load(key: str) -> LoadedEnv:
    vf = import_verifiers()
    spec = json.loads(key)
    env = vf.load_environment(vf.resolve_env_config(spec))
    if not env.taskset.bounded:
        raise ValueError(f"verifiers taskset {spec['taskset']['id']!r} is infinite: bound it in its options")
    return LoadedEnv(env, list(env.taskset))


def load_vf_env(taskset: str, taskset_args: dict | None = None, env: str = "",
                env_args: dict | None = None) -> LoadedEnv:
    """The verifiers environment of ``taskset`` (played by ``env``, default: the taskset's own), loaded once per
    process and options."""
    return _load(json.dumps(_spec(taskset, taskset_args, env, env_args), sort_keys=True))


def _message(m) -> dict[str, str]:
    from verifiers.v1.types import content_text

    if isinstance(m, dict):
        return {"role": m["role"], "content": m.get("content") if isinstance(m.get("content"), str)
                else content_text(m.get("content"))}
    return {"role": m.role, "content": content_text(m.content)}


def task_messages(data) -> list[dict[str, str]]:
    """A task's first messages as chat dicts: its ``system_prompt``, then its ``prompt`` (a string: one user
    message; Messages: each of them)."""
    msgs = [{"role": "system", "content": data.system_prompt}] if data.system_prompt else []
    if isinstance(data.prompt, str):
        msgs.append({"role": "user", "content": data.prompt})
    elif data.prompt:
        msgs.extend(_message(m) for m in data.prompt)
    return msgs


def verifiers_problems(taskset: str, taskset_args: dict | None = None, env: str = "",
                       env_args: dict | None = None) -> list[Problem]:
    """Every task of the taskset as a Problem: messages from the task, ``answer`` its data's ``answer`` field
    (if any, as a string), metadata naming the taskset and the task's index."""
    loaded = load_vf_env(taskset, taskset_args, env, env_args)
    out = []
    for i, task in enumerate(loaded.tasks):
        data = task.data
        msgs = task_messages(data)
        if not msgs:  # a prompt-less task: the env's program opens it (reset sends its first message)
            msgs = [{"role": "user", "content": ""}]
        answer = getattr(data, "answer", "")
        out.append(Problem(f"{taskset}/{data.id if data.id is not None else i}", messages=msgs,
                           answer="" if answer is None else str(answer),
                           metadata={METADATA_KEY: {"taskset": taskset, "taskset_args": dict(taskset_args or {}),
                                                    "env": env, "env_args": dict(env_args or {}), "index": i}}))
    return out


# --------------------------------------------------------------------------- registration
from rlvr.tasks.registry import TASKS, held_out_split  # noqa: E402  (registry imports this module at its end)


def _check(params: dict[str, Any], **_: Any) -> None:
    check_taskset(params.get("taskset") or "", params.get("taskset_args"), params.get("env") or "",
                  params.get("env_args"))
    if params.get("num_train", 0) < 0:
        raise ValueError("num_train must be >= 0")


@TASKS.register("verifiers", check=_check,
                doc="the tasks of a verifiers taskset (pip install 'rlvr[verifiers]'): task.params {taskset: ID, "
                    "taskset_args: {...}, env: ID, env_args: {...}, num_train}; play them with env.name=verifiers")
def verifiers_task(taskset: str = "", taskset_args: dict[str, Any] | None = None, env: str = "",
                   env_args: dict[str, Any] | None = None, num_train: int = 0, num_heldout: int = 256,
                   seed: int = 0):
    """``taskset``: an installed verifiers taskset id; ``taskset_args``: its config's fields (``--env.taskset.*``);
    ``env``: a verifiers Env id that plays it (empty: the taskset's own, else ``SingleAgentEnv``), ``env_args``
    its config's fields; ``num_train``: training problems at most (0: all not held out)."""
    check_taskset(taskset, taskset_args, env, env_args)
    train, held = held_out_split(verifiers_problems(taskset, taskset_args, env, env_args), num_heldout, seed)
    return (train[:num_train] if num_train else train), held
