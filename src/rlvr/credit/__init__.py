"""The credit stage: rewards of an episode (outcome, per turn, per step) -> per-token advantages.

:class:`~rlvr.credit.stage.CreditStage` composes the registered outcome estimators
(:data:`rlvr.algorithms.ADVANTAGE_ESTIMATORS`), process credit from a PRM's step scores, and turn-level credit
for multi-turn episodes (:data:`~rlvr.credit.turns.TURN_CREDIT`: ``loo``, ``gigpo``).
"""

from rlvr.credit.settings import CreditSettings, DistillSettings, ProcessSettings, TurnSettings
from rlvr.credit.stage import Credit, CreditStage
from rlvr.credit.turns import TURN_CREDIT

__all__ = ["CreditSettings", "DistillSettings", "ProcessSettings", "TurnSettings", "Credit", "CreditStage", "TURN_CREDIT"]
