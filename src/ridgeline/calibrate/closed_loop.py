"""Replaying a measured run as it ran: its users, when it was a closed loop.

A closed-loop run (a fixed number of users, each sending its next request when its previous
reply ended) replayed as an open-loop schedule of its measured send times carries the
measured load whatever the prediction says: a prediction that serves faster then has fewer
requests in flight than the engine had, and its error feeds itself. Replayed as its users,
each user sends its next request when its previous reply ended *in the simulation*, after
the same pause it took in the measurement (per request, `Users.think_s`; zero for a client
with no think time), starting from the user's measured first send. The reply ends at the
client: a profile's per-request overhead delays it past the engine's last token, and the
user waits for that too (`calibrate/explain.py`).

The users are read back from the trace: in send order, the first C requests start the C
users; every later request belongs to the user whose reply ended most recently before it
was sent (a user whose reply is still running cannot send). The trace is a closed loop when
its header says so (bench: `load.pattern` "closed", `load.concurrency` C), or, with no
header load, when every later request was sent within `DETECT_GAP_S` of a reply's end with
C the most requests ever in flight.

>>> import numpy as np
>>> users = assign_users(np.array([0.0, 0.1, 1.0, 1.2]), np.array([1.0, 1.2, 2.0, 2.2]), 2)
>>> users.user_of.tolist(), users.start_s.tolist(), users.think_s.tolist()
([0, 1, 0, 1], [0.0, 0.1], [0.0, 0.0, 0.0, 0.0])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ridgeline.errors import RidgelineError

# A reply's end and the same user's next send: within this on the client's clock.
TOLERANCE_S = 1e-3
# Without a header: a trace whose every later send follows a reply's end this closely.
DETECT_GAP_S = 0.02


@dataclass
class Users:
    user_of: np.ndarray     # per request (send order): its user
    start_s: np.ndarray     # per user: its first send
    think_s: np.ndarray     # per request: send minus its user's previous end (0: first)
    max_gap_s: float        # the largest of those pauses


def assign_users(sent_s: np.ndarray, end_s: np.ndarray, users: int,
                 strict: bool = False) -> Users | None:
    """Users of requests given in send order (see the module docstring). A request sent while
    every user is busy goes to the one whose reply ends first (None instead when `strict`)."""
    n = sent_s.size
    user_of = np.zeros(n, dtype=np.int64)
    think = np.zeros(n)
    last_end = np.full(users, -np.inf)
    starts: list[float] = []
    for j in range(n):
        s = float(sent_s[j])
        if len(starts) < users:
            u = len(starts)
            starts.append(s)
        else:
            free = np.flatnonzero(last_end <= s + TOLERANCE_S)
            if free.size:
                u = int(free[np.argmax(last_end[free])])
            elif strict:
                return None
            else:
                u = int(np.argmin(last_end))
            think[j] = max(s - float(last_end[u]), 0.0)
        user_of[j] = u
        last_end[u] = float(end_s[j])
    return Users(user_of, np.asarray(starts), think, float(think.max()) if n else 0.0)


@dataclass
class ReplayPlan:
    """How a trace is replayed: `closed` with its users, or open loop on its send times."""

    closed: bool
    users: int
    how: str                 # a line for the output
    user_info: Users | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"loop": "closed" if self.closed else "open", "users": self.users,
                "how": self.how}


def plan_replay(sent_s: np.ndarray, end_s: np.ndarray, load: dict[str, Any],
                mode: str = "auto", in_flight_peak: int = 0) -> ReplayPlan:
    """The replay of requests in send order (`mode`: auto, closed or open)."""
    if mode not in ("auto", "closed", "open"):
        raise ValueError(mode)
    pattern = str(load.get("pattern", ""))
    conc = load.get("concurrency")
    header_closed = pattern.startswith("closed") and isinstance(conc, int) and conc > 0
    if mode == "open":
        return ReplayPlan(False, 0, "open loop: the measured send times (--open-loop)")
    if header_closed:
        c = int(conc)                                        # type: ignore[arg-type]
        users = assign_users(sent_s, end_s, c)
        return ReplayPlan(True, c, f"closed loop: {c} users (from the trace header), each "
                          "sending when its previous reply ended in the simulation, from "
                          "its measured first send", users)
    if pattern and mode == "auto":
        return ReplayPlan(False, 0, f"open loop: the measured send times (the header's "
                          f"load pattern is {pattern!r})")
    c = max(int(in_flight_peak), 1)
    users = assign_users(sent_s, end_s, c, strict=True)
    if users is not None and sent_s.size > c and users.max_gap_s <= DETECT_GAP_S:
        return ReplayPlan(True, c, f"closed loop: {c} users (detected: every request after "
                          f"the first {c} was sent within {users.max_gap_s * 1e3:.1f} ms "
                          "of a reply's end), each sending when its previous reply ended in "
                          "the simulation", users)
    if mode == "closed":
        raise RidgelineError("--closed-loop: the trace is not a closed loop (no header "
                             "concurrency, and its sends do not follow replies' ends); "
                             "allowed: a closed-loop trace, or --open-loop")
    return ReplayPlan(False, 0, "open loop: the measured send times (no closed loop in the "
                      "header or the send times)")


__all__ = ["DETECT_GAP_S", "TOLERANCE_S", "ReplayPlan", "Users", "assign_users",
           "plan_replay"]
