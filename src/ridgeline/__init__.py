"""ridgeline: predict, simulate, emulate, measure and analyze LLM inference serving."""

__version__ = "0.1.0"
