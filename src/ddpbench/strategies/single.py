"""`single`: one process, no communication; the baseline every speedup is measured against."""

from ddpbench.strategies.base import Strategy

SETTINGS = ()  # the strategy-specific cell parameters it reads


class Single(Strategy):
    name = "single"
    comm_volume = "none"
    schedule = "none"
    min_world = 1
    max_world = 1


STRATEGY = Single()
