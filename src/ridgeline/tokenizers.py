"""Tokenizers, loaded only when asked for: `bench` counts tokens on the client with one and
`serve --tokenizer` counts prompts as the served model does (one loader for both).

Output tokens are taken, in order of trust, from the server's usage report
(`stream_options.include_usage`), else from a tokenizer given with `--tokenizer`, else
from the number of output chunks (one token per chunk, which under-counts servers that
send several tokens per chunk). Every request records which source it used.

Tokenizers are optional: a Hugging Face `tokenizer.json` needs the `tokenizers` package;
`tiktoken:<encoding>` is served offline by the `bpe-openai` wheel when installed, else
needs `tiktoken` and its encoding files (downloaded on first use, so offline machines need
them cached). `tokenizers` and `tiktoken` are not dependencies of ridgeline.

>>> load_tokenizer(None) is None
True
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from ridgeline.errors import RidgelineError


class Tokenizer(Protocol):
    name: str

    def count(self, text: str) -> int: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


class _HFTokenizer:
    def __init__(self, path: Path) -> None:
        try:
            from tokenizers import Tokenizer as HFTokenizer
        except ImportError:
            raise RidgelineError(
                f"--tokenizer: {str(path)!r} is a Hugging Face tokenizer.json, which needs the "
                "'tokenizers' package (pip install tokenizers)"
            ) from None
        try:
            self._tok = HFTokenizer.from_file(str(path))
        except Exception as exc:  # the library raises its own exception type
            raise RidgelineError(f"--tokenizer: cannot load {str(path)!r}: {exc}") from None
        self.name = f"hf:{path.name}"

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        return str(self._tok.decode(ids))

    def encode_ordinary(self, text: str) -> list[int]:  # the emulator's encoder interface
        return self.encode(text)


class _TiktokenTokenizer:
    def __init__(self, encoding: str) -> None:
        try:
            import tiktoken
        except ImportError:
            raise RidgelineError(
                "--tokenizer: tiktoken encodings need the 'tiktoken' package (pip install "
                "tiktoken)"
            ) from None
        try:
            self._enc = tiktoken.get_encoding(encoding)
        except Exception as exc:  # unknown name, or no network to fetch the encoding file
            raise RidgelineError(
                f"--tokenizer: tiktoken encoding {encoding!r} did not load ({type(exc).__name__}"
                "); it is downloaded on first use, so cache it (TIKTOKEN_CACHE_DIR) or give a "
                "tokenizer.json file"
            ) from None
        self.name = f"tiktoken:{encoding}"

    def encode(self, text: str) -> list[int]:
        return list(self._enc.encode(text, disallowed_special=()))

    def count(self, text: str) -> int:
        return len(self._enc.encode(text, disallowed_special=()))

    def decode(self, ids: list[int]) -> str:
        return str(self._enc.decode(ids))


class _BpeOpenAITokenizer:
    """tiktoken's encodings from the `bpe-openai` wheel, which ships them (works offline)."""

    def __init__(self, encoding: str) -> None:
        import warnings

        with warnings.catch_warnings():  # the package uses a deprecated importlib API
            warnings.simplefilter("ignore", DeprecationWarning)
            import bpe_openai

            self._enc = bpe_openai.get_encoding(encoding)
        self.name = f"tiktoken:{encoding} (bpe-openai)"

    def encode(self, text: str) -> list[int]:
        return list(self._enc.encode_ordinary(text))

    def count(self, text: str) -> int:
        return len(self._enc.encode_ordinary(text))

    def decode(self, ids: list[int]) -> str:
        return str(self._enc.decode(ids))


def load_tokenizer(spec: str | None) -> Tokenizer | None:
    """`None` -> no tokenizer; `tiktoken:<encoding>`; or a path to a tokenizer.json.

    `tiktoken:<encoding>` uses the `bpe-openai` wheel when it is installed (it carries the
    encoding files, so it works offline), else `tiktoken` itself.
    """
    if not spec:
        return None
    if spec.startswith("tiktoken:"):
        encoding = spec.split(":", 1)[1]
        try:
            return _BpeOpenAITokenizer(encoding)
        except Exception:  # not installed, or an encoding it does not ship
            return _TiktokenTokenizer(encoding)
    path = Path(spec)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        if _looks_like_hub_id(spec):
            return _HFTokenizer(_hub_tokenizer_json(spec))
        raise RidgelineError(
            f"--tokenizer: got {spec!r}; allowed: a tokenizer.json file (or a folder holding "
            "one), a Hugging Face model id (org/name) or tiktoken:<encoding>"
        )
    return _HFTokenizer(path)


def _looks_like_hub_id(spec: str) -> bool:
    parts = spec.split("/")
    return len(parts) == 2 and all(parts) and not spec.startswith((".", "/", "~")) and \
        not spec.endswith(".json")


def _hub_tokenizer_json(repo_id: str) -> Path:
    """The model's tokenizer.json from the Hugging Face Hub (or its local cache)."""
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise RidgelineError(
            f"--tokenizer: {repo_id!r} is a Hugging Face model id, which needs the "
            "'huggingface_hub' package (pip install 'ridgeline[tokenizer]'); or give a local "
            "tokenizer.json"
        ) from None
    try:
        return Path(hf_hub_download(repo_id, "tokenizer.json"))
    except Exception as exc:  # offline, gated, missing file: the hub raises many types
        raise RidgelineError(
            f"--tokenizer: cannot fetch tokenizer.json of {repo_id!r} from the Hugging Face "
            f"Hub ({type(exc).__name__}; offline, gated or no such model?); download it once "
            "and give its path"
        ) from None


__all__ = ["Tokenizer", "load_tokenizer"]
