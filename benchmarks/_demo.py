"""The demo config's learner memory options, switched off.

``configs/arithmetic_grpo.yaml`` turned them on on 2026-11-24 (chunked LM head, packed
micro-batches, activation checkpointing, bf16 AdamW moments, mmap'd allocations, a sampler copy
freed while learning: peak RSS 6.6 -> 2.4 GB; packed prompts shared by their group followed later
that day). Benchmarks whose anchor is "the learner with none of them" (learner_memory.py,
learner_packing.py) and the race, recorded before that date with the fp32-AdamW learner that TRL
also uses, put these overrides first so their variants mean what their names say.
"""

MEMORY_OPTIONS_OFF = [
    "train.logprob_chunk_size=0", "train.micro_batch_tokens=0", "train.share_prompts=false",
    "train.activation_checkpointing=false",
    "train.optimizer=adamw", "train.malloc_mmap_threshold=0", "rollout.sleep_while_learning=false",
]
