"""An rlvr plugin: importing it registers a task, a verifier and an environment.

* ``task.name=guess_targets``: problems "guess my number" with a hidden target;
* ``reward.verifier=last_integer``: the last integer of a completion against the reference;
* ``env.name=guess_number``: a guessing game with "higher" / "lower" feedback, scored by the verifier.
"""

from rlvr_plugin_example import env, task, verifier  # noqa: F401 (each registers its component)
