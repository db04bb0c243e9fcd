"""Build the offline tokenizer the peer runs used (no model hub here): a byte-level BPE of
4,096 tokens trained on AIPerf's own shipped corpus (aiperf/dataset/generator/assets/
shakespeare.txt). The emulator's filler output words (" the", " of", ...) are each one token
in it, so a client that re-tokenizes the streamed text counts what the server sent.

    python make_tokenizer.py .../aiperf/dataset/generator/assets/shakespeare.txt OUT_DIR
    ridgeline serve --tokenizer OUT_DIR ...; aiperf profile --tokenizer OUT_DIR ...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

FILLER = [" the", " of", " and", " to", " in", " a", " is", " that", " for", " it", " as",
          " was", " with", " be", " by", " on", " not", " he", " this", " are"]


def main(corpus: Path, out: Path) -> None:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=4096, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train([str(corpus)], trainer)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 131072,
        "eos_token": "<|endoftext|>", "bos_token": "<|endoftext|>",
        "unk_token": "<|endoftext|>"}))
    multi = [w for w in FILLER if len(tok.encode(w).ids) != 1]
    print("filler words of more than one token:", multi or "none")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
