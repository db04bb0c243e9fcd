"""Llama GGUF models with random weights, for running a real llama.cpp engine offline.

Weights cannot be downloaded here, and timing does not care what a model says, so these
models are random: a Llama-architecture GGUF (F32) with an SPM vocabulary (byte-fallback
tokens `<0x00>`..`<0xFF>`, `<s>`, `</s>`, ChatML markers) and a chat template, written with
the `gguf` package (`pip install 'ridgeline[real-engine]'`). Next to each GGUF sits the matching
Hugging Face `config.json`, so `ridgeline estimate --model DIR/config.json` describes the very
model the engine runs.

The output matrix is rigged so that generation is exactly one visible token per step: every
token embedding carries a large constant in hidden dimension 0, so after the final RMSNorm
that dimension is large and positive whatever the input; the LM-head rows of the special,
control and byte tokens are strongly negative there (and zero elsewhere), the rows of the
normal tokens are zero there. Special and byte tokens therefore never win sampling, every
sampled token is a normal token whose piece is a non-empty ASCII string, and a request with
`max_tokens: N` (and `ignore_eos`) streams exactly N one-token chunks.

The vocabulary holds every prefix of "▁" + each word `ridgeline bench` builds prompts from
(`bench.words.WORDS`), so a synthetic prompt of n words tokenizes to exactly n tokens (plus
BOS). Files are cached outside the checkout, keyed by shape and seed:

    ${RIDGELINE_CACHE:-~/.cache/ridgeline}/models/<name>-<key>/{model.gguf,config.json}

>>> TINY.total_params == TINY.to_model_spec().total_params
True
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ridgeline.bench.words import WORDS
from ridgeline.errors import RidgelineError
from ridgeline.specs.model import ModelSpec, from_hf_config

WRITER_VERSION = 1  # bump when the file layout or rigging changes (new cache key)

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPACE = "\u2581"  # SentencePiece's word-start marker
EMBED_DIM0 = 64.0  # the constant every embedding carries in hidden dimension 0
BANNED_LOGIT_WEIGHT = -100.0  # LM-head weight on dimension 0 for special and byte tokens
INIT_STD = 0.02


@dataclass(frozen=True)
class GgufShape:
    """Shape of a Llama-architecture random model."""

    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    vocab_size: int
    context_length: int = 4096
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def total_params(self) -> int:
        d, kv = self.hidden_size, self.num_kv_heads * self.head_dim
        layer = 2 * d * d + 2 * d * kv + 3 * d * self.intermediate_size + 2 * d
        return self.num_layers * layer + 2 * self.vocab_size * d + d

    @property
    def file_bytes_approx(self) -> int:
        return 4 * self.total_params

    def hf_config(self) -> dict[str, Any]:
        """The Hugging Face config.json of this model (what `ridgeline estimate` reads)."""
        return {
            "_name_or_path": self.name,
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "vocab_size": self.vocab_size,
            "max_position_embeddings": self.context_length,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "hidden_act": "silu",
            "tie_word_embeddings": False,
            "attention_bias": False,
            "torch_dtype": "float32",
            "bos_token_id": 1,
            "eos_token_id": 2,
        }

    def to_model_spec(self) -> ModelSpec:
        return from_hf_config(self.hf_config(), name=self.name)

    def cache_key(self, seed: int) -> str:
        blob = json.dumps({"shape": asdict(self), "seed": seed, "writer": WRITER_VERSION},
                          sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


# ~5 M parameters, ~19 MB: fast to start, for integration tests.
TINY = GgufShape("ridgeline-tiny", hidden_size=256, num_layers=2, num_heads=4, num_kv_heads=2,
                 intermediate_size=768, vocab_size=6000)
# ~99.5 M parameters, ~398 MB F32: decode reads ~300 MB per step, memory-bound on a CPU.
MEMBOUND = GgufShape("ridgeline-membound", hidden_size=768, num_layers=8, num_heads=12,
                     num_kv_heads=4, intermediate_size=2048, vocab_size=32000)
# ~13.6 M parameters, ~54 MB F32: steps of several ms, well above the client's resolution
# and the scheduling jitter of a shared box (the real-engine CI test's accuracy check).
SMALL = GgufShape("ridgeline-small", hidden_size=512, num_layers=4, num_heads=8,
                  num_kv_heads=4, intermediate_size=1536, vocab_size=1000)
SHAPES = {"tiny": TINY, "membound": MEMBOUND, "small": SMALL}


@dataclass(frozen=True)
class GgufModel:
    """A written model: the GGUF file, its config.json, and the shape."""

    gguf_path: Path
    config_path: Path
    shape: GgufShape

    @property
    def directory(self) -> Path:
        return self.gguf_path.parent


def cache_root() -> Path:
    return Path(os.environ.get("RIDGELINE_CACHE") or Path.home() / ".cache" / "ridgeline")


def build_vocab(vocab_size: int) -> tuple[list[str], list[float], list[int]]:
    """SPM vocabulary: specials, 256 byte tokens, ChatML markers, single characters, every
    prefix of the prompt words, then filler words up to `vocab_size`."""
    from gguf import TokenType

    tokens = ["<unk>", "<s>", "</s>"]
    types = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [TokenType.BYTE] * 256
    tokens += ["<|im_start|>", "<|im_end|>"]
    types += [TokenType.CONTROL] * 2
    seen = set(tokens)

    def add(piece: str) -> None:
        if piece not in seen:
            seen.add(piece)
            tokens.append(piece)
            types.append(TokenType.NORMAL)

    add(SPACE)
    for c in range(33, 127):
        add(chr(c))
    # Every prefix, so SPM's pairwise merges build each "▁word" as one token.
    for word in (*WORDS, "user", "assistant", "system"):
        piece = SPACE + word
        for end in range(2, len(piece) + 1):
            add(piece[:end])
    if len(tokens) > vocab_size:
        raise RidgelineError(f"vocab_size: got {vocab_size}; allowed: >= {len(tokens)}")
    i = 0
    while len(tokens) < vocab_size:
        add(f"{SPACE}x{i}")
        i += 1
    scores = [0.0 if t != TokenType.NORMAL else -float(n) for n, t in enumerate(types)]
    return tokens, scores, [int(t) for t in types]


def banned_token_mask(types: list[int]) -> np.ndarray:
    """True for tokens that must never be generated (everything but normal tokens)."""
    from gguf import TokenType

    return np.array([t != TokenType.NORMAL for t in types])


def write_gguf(shape: GgufShape, path: Path, seed: int = 0) -> None:
    """Write the random model to `path` (overwrites)."""
    try:
        import gguf
    except ImportError:
        raise RidgelineError("real-engine models need the 'gguf' package "
                             "(pip install 'ridgeline[real-engine]')") from None
    rng = np.random.default_rng(seed)
    d, ff, v = shape.hidden_size, shape.intermediate_size, shape.vocab_size
    kv = shape.num_kv_heads * shape.head_dim
    tokens, scores, types = build_vocab(v)

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(shape.name)
    w.add_context_length(shape.context_length)
    w.add_embedding_length(d)
    w.add_block_count(shape.num_layers)
    w.add_feed_forward_length(ff)
    w.add_head_count(shape.num_heads)
    w.add_head_count_kv(shape.num_kv_heads)
    w.add_rope_dimension_count(shape.head_dim)
    w.add_rope_freq_base(shape.rope_theta)
    w.add_layer_norm_rms_eps(shape.rms_norm_eps)
    w.add_vocab_size(v)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(True)
    w.add_chat_template(CHATML_TEMPLATE)

    def normal(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * INIT_STD).astype(
            np.float32)

    # numpy shape is (out_features, in_features), as llama.cpp's converter writes it.
    embed = normal(v, d)
    embed[:, 0] = EMBED_DIM0
    w.add_tensor("token_embd.weight", embed)
    for i in range(shape.num_layers):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(d, dtype=np.float32))
        w.add_tensor(f"blk.{i}.attn_q.weight", normal(d, d))
        w.add_tensor(f"blk.{i}.attn_k.weight", normal(kv, d))
        w.add_tensor(f"blk.{i}.attn_v.weight", normal(kv, d))
        w.add_tensor(f"blk.{i}.attn_output.weight", normal(d, d))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(d, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", normal(ff, d))
        w.add_tensor(f"blk.{i}.ffn_up.weight", normal(ff, d))
        w.add_tensor(f"blk.{i}.ffn_down.weight", normal(d, ff))
    w.add_tensor("output_norm.weight", np.ones(d, dtype=np.float32))
    head = normal(v, d) * 10.0  # wider logits among normal tokens: varied text
    banned = banned_token_mask(types)
    head[:, 0] = 0.0
    head[banned, :] = 0.0
    head[banned, 0] = BANNED_LOGIT_WEIGHT
    w.add_tensor("output.weight", head)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def ensure_model(shape: GgufShape | str = "tiny", seed: int = 0,
                 root: Path | None = None) -> GgufModel:
    """The cached model for `shape` and `seed`, writing it first when absent.

    >>> # m = ensure_model("membound"); m.gguf_path, m.config_path
    """
    if isinstance(shape, str):
        if shape not in SHAPES:
            raise RidgelineError(f"model shape: got {shape!r}; allowed: {', '.join(SHAPES)}")
        shape = SHAPES[shape]
    folder = (root or cache_root() / "models") / f"{shape.name}-{shape.cache_key(seed)}"
    gguf_path, config_path = folder / "model.gguf", folder / "config.json"
    if gguf_path.is_file() and config_path.is_file():
        return GgufModel(gguf_path, config_path, shape)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f"model.gguf.tmp{os.getpid()}"
    try:
        write_gguf(shape, tmp, seed)
        os.replace(tmp, gguf_path)  # atomic: a half-written file is never taken as a model
    finally:
        tmp.unlink(missing_ok=True)
    cfg = dict(shape.hf_config(), _ridgeline={"seed": seed, "writer_version": WRITER_VERSION,
                                              "gguf": gguf_path.name})
    tmp_cfg = folder / f"config.json.tmp{os.getpid()}"
    tmp_cfg.write_text(json.dumps(cfg, indent=2) + "\n")
    os.replace(tmp_cfg, config_path)
    return GgufModel(gguf_path, config_path, shape)


def main(argv: list[str] | None = None) -> int:
    """`python -m ridgeline.calibrate.gguf_model [tiny|membound ...]`: write, print paths."""
    import sys

    names = (argv if argv is not None else sys.argv[1:]) or ["tiny"]
    for name in names:
        m = ensure_model(name)
        print(f"{name}\t{m.gguf_path}\t{m.config_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
