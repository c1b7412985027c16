"""Rollout engines behind one interface: ``hf`` (CPU default); ``vllm`` (GPU, optional)."""

from rlvr.engines.base import EngineBase, RolloutEngine, SamplingParams
from rlvr.engines.hf import HFEngine, format_prompt

__all__ = ["EngineBase", "HFEngine", "RolloutEngine", "SamplingParams", "format_prompt"]
