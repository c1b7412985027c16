"""Evaluation: accuracy of a policy on benchmark problems, with confidence intervals.

The package is also callable: ``rlvr.evaluate(model, task=..., ...)`` is
:func:`rlvr.evaluate.api.evaluate`, the one-call form of ``rlvr eval``.
"""

import sys
import types


class _CallablePackage(types.ModuleType):
    def __call__(self, *args, **kwargs):
        from rlvr.evaluate.api import evaluate

        return evaluate(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
