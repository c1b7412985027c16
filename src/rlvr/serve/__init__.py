"""An OpenAI-compatible chat-completions endpoint in front of the policy under training.

:class:`~rlvr.serve.backend.Backend` answers requests from an engine and records each episode token in /
token out (:mod:`rlvr.serve.recording`); :class:`~rlvr.serve.app.Server` serves it over HTTP (FastAPI on
uvicorn, on a background thread; the ``serve`` extra); :func:`~rlvr.serve.agents.run_agent_episodes` runs the
agents of ``env.name=agent`` against it and turns their recordings into training samples.  See
``docs/agents.md``.
"""

from rlvr.serve.backend import Backend, ServeOptions
from rlvr.serve.chat import ApiError
from rlvr.serve.recording import EpisodeRecording, Segment, continuation_ids

__all__ = ["Backend", "ServeOptions", "ApiError", "EpisodeRecording", "Segment", "continuation_ids"]
