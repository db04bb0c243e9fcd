"""The seeded random streams of a workload, shared by simulate and bench.

One seed gives the same prompt and output lengths and the same arrival times in
`ridgeline simulate` and `ridgeline bench`, so a measurement and its simulation run the
identical request list. Each aspect draws from its own stream (spawned from one
`SeedSequence`), so changing the rate does not change the lengths, and the bench's prompt
texts do not change the lengths either.

>>> s = workload_streams(7)
>>> from ridgeline.workload.lengths import parse_lengths
>>> int(parse_lengths("uniform:min=1,max=1000").sample(1, s.lengths)[0]) == int(
...     parse_lengths("uniform:min=1,max=1000").sample(1, workload_streams(7).lengths)[0])
True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class WorkloadStreams:
    """Independent generators: lengths (prompt, then output), arrivals, think times, text."""

    lengths: np.random.Generator
    arrivals: np.random.Generator
    think: np.random.Generator
    text: np.random.Generator


def workload_streams(seed: int) -> WorkloadStreams:
    """The four streams of `seed`. Draw prompt lengths, then output lengths, from `lengths`."""
    gens = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(4)]
    return WorkloadStreams(*gens)
