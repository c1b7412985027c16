"""Rollout engines behind one interface: ``hf`` (CPU default); ``vllm`` (GPU, optional)."""

from rlvr.rollout.base import RolloutEngine, SamplingParams
from rlvr.rollout.factory import make_engine
from rlvr.rollout.hf import HFEngine, format_prompt

__all__ = ["HFEngine", "RolloutEngine", "SamplingParams", "format_prompt", "make_engine"]
