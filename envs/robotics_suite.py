"""gymnasium-robotics' tasks, registered and adapted to MuJoCo 4 on import.

gymnasium's ``module:Id`` form (``rlcore.envs.robotics_suite:FetchPush-v4``, what
``rlcore.envs.make.resolve_env_id`` gives for the suite's ids) imports this module in every
process that makes such a task; the adapter is ``rlcore.envs.third_party``.
"""

from rlcore.envs import third_party

ADAPTED = third_party.adapt()  # whether MuJoCo needed the joint accessors replaced
