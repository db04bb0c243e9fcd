"""The one compiled part: the simulator's engine core (src/ridgeline/sim/_core.c).

Optional: without a C compiler the build warns and ridgeline runs the Python engine
(the same results, slower). -ffp-contract=off keeps a * b + c two roundings, as in Python.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("ridgeline.sim._core", ["src/ridgeline/sim/_core.c"],
                             extra_compile_args=["-O2", "-ffp-contract=off"],
                             optional=True),
                   # The trace reader's fast path (trace/_scan.c); the reader falls back to
                   # its Python paths without it.
                   Extension("ridgeline.trace._scan", ["src/ridgeline/trace/_scan.c"],
                             extra_compile_args=["-O2"], optional=True),
                   # analyze's per-request ITL counts (metrics/_kernels.c); numpy without it.
                   Extension("ridgeline.metrics._kernels", ["src/ridgeline/metrics/_kernels.c"],
                             extra_compile_args=["-O2", "-ffp-contract=off"], optional=True)])
