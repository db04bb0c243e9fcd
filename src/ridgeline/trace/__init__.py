"""The one trace format: schema, crash-safe writer, columnar reader, validator and importers of
other tools' results (docs/trace.md).
"""

# The package's public modules (imported one by one, so importing the package stays cheap).
__all__ = [
    "formats",
    "importers",
    "reader",
    "schema",
    "table",
    "validator",
    "writer",
]
