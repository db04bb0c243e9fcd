"""`ridgeline plan`: search configurations for the cheapest one meeting the SLOs.

>>> from ridgeline.plan import PlanRequest, plan   # doctest: +SKIP
"""

from ridgeline.plan.search import PlanResult, plan
from ridgeline.plan.space import PlanRequest

__all__ = ["PlanRequest", "PlanResult", "plan"]
