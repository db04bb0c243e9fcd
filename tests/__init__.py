"""ridgeline's tests: one folder per package (tests/<package>/), cross-cutting checks at the top."""
