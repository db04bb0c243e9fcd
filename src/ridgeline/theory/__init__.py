"""Closed-form serving math (Little's law, Amdahl, M/M/1, Erlang C) and measurement statistics.
"""

# The package's public modules (imported one by one, so importing the package stays cheap).
__all__ = [
    "queueing",
    "stats",
]
