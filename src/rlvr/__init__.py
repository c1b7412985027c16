"""rlvr: reinforcement learning with verifiable rewards for LM reasoning.

See docs/architecture.md for the data flow; the CLI is ``rlvr --help``.
"""

__version__ = "0.1.0"
