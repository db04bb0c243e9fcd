"""ridgeline: predict, simulate, emulate, measure and analyze LLM inference serving.

The map of the packages, the rules that keep them whole and a "where is X" table are in
docs/architecture.md. The public entry point is the `ridgeline` command (`ridgeline.cli`);
each sub-package says what it holds in its own docstring.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
