"""`--tokenizer`: prompts of exactly N tokens for the served model's tokenizer, and an
emulator (`serve --tokenizer`) that counts them as that model would.

The tokenizer is built in the test: a small BPE trained on a few sentences, so common words
split into several tokens and a prompt of N words is NOT N tokens.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

tokenizers = pytest.importorskip("tokenizers")

RIDGELINE = str(Path(sys.executable).parent / "ridgeline")


@pytest.fixture(scope="module")
def bpe_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from ridgeline.bench.dataset import WORDS

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    rng = np.random.default_rng(0)
    corpus = [" ".join(rng.choice(WORDS, 30)) for _ in range(200)]
    tok.train_from_iterator(corpus, trainer)
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return path


def test_the_test_tokenizer_splits_words(bpe_json: Path) -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(bpe_json))
    text = "the people between during season family"
    assert len(tok.encode(text).ids) > len(text.split())  # not one token per word


def test_prompts_have_exactly_n_tokens_and_the_emulator_counts_them(
        bpe_json: Path, tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(bpe_json))
    trace = tmp_path / "t.jsonl"
    out = subprocess.run(
        [RIDGELINE, "bench", "--target", "emulator", "--model", "llama-3.1-8b",
         "--emulator-arg=--tokenizer", f"--emulator-arg={bpe_json}",
         "--tokenizer", str(bpe_json), "--concurrency", "4", "--requests", "12",
         "--prompt", "uniform:min=20,max=300", "--output", "fixed:4", "--trace", str(trace),
         "--no-server-metrics", "--prompt-nonce", "3"],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    recs = [json.loads(x) for x in trace.read_text().splitlines()[1:-1]]
    header = json.loads(trace.read_text().splitlines()[0])
    assert header["engine_config"]["tokenizer"] == str(bpe_json)
    # Lengths are simulate's draws for seed 0 (independent of the tokenizer)...
    from ridgeline.workload.lengths import parse_lengths
    from ridgeline.workload.streams import workload_streams

    want = parse_lengths("uniform:min=20,max=300").sample(12, workload_streams(0).lengths)
    got = {r["id"]: r["prompt_tokens"] for r in recs}
    # ...and the server, counting with the same tokenizer, saw exactly that many tokens.
    assert all(r["prompt_token_source"] == "usage" for r in recs)
    assert [got[f"r{i}"] for i in range(12)] == [int(x) for x in want]
    # Re-check one prompt text independently: the dataset builder's text encodes to N.
    from ridgeline.bench.dataset import exact_text
    from ridgeline.bench.tokens import load_tokenizer

    rt = load_tokenizer(str(bpe_json))
    text = exact_text(57, np.random.default_rng(1), rt)
    assert len(tok.encode(text, add_special_tokens=False).ids) == 57


@pytest.mark.parametrize(("args", "message"), [
    (["--tokenizer", "no/such-model-xyz"], "--tokenizer:"),
    (["--tokenizer", "missing.json"], "--tokenizer: got 'missing.json'"),
])
def test_bad_tokenizer_is_one_line(args: list[str], message: str, tmp_path: Path) -> None:
    for cmd in (["bench", "--base-url", "http://127.0.0.1:9"], ["serve", "--port", "0"]):
        out = subprocess.run([RIDGELINE, *cmd, *args], capture_output=True, text=True,
                             timeout=120, cwd=tmp_path,
                             env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})
        assert out.returncode == 2, (cmd, out.stderr)
        assert "Traceback" not in out.stderr
        errors = [x for x in out.stderr.splitlines() if x.startswith("error:")]
        assert len(errors) == 1 and message in errors[0], out.stderr
