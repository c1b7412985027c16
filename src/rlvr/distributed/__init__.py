"""Scaling past one CPU: optional multi-process / multi-GPU pieces.

Nothing here is imported by ``rlvr`` itself on the CPU path; import the
submodules explicitly (``rlvr.distributed.fsdp``, ``rlvr.distributed.sharded_checkpoint``,
...).  Each pulls in ``torch.distributed`` (or Ray) only when imported.
"""
