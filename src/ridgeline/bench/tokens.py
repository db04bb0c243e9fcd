"""Counting tokens on the client: the tokenizer loader lives in `ridgeline.tokenizers` (shared
with the emulator, so neither package imports the other); re-exported here for the bench.

>>> load_tokenizer(None) is None
True
"""

from ridgeline.tokenizers import Tokenizer, load_tokenizer

__all__ = ["Tokenizer", "load_tokenizer"]
