"""Model spec: the shapes that determine FLOPs and bytes, parsed from a HF config.json.

Supported families (SUPPORTED_TYPES, by `model_type` or `architectures`; one parser each
in specs/families.py): dense llama, mistral, qwen2, qwen3, gemma2, gemma3_text, phi3,
granite, olmo2, cohere2; MoE mixtral, qwen2_moe, qwen3_moe, llama4_text, gpt_oss,
qwen3_next (and Qwen3.5), glm4_moe, minimax_m2, ernie4_5_moe; MLA deepseek_v2 and
deepseek_v3 (and Kimi-K2); hybrid falcon_h1 (its Mamba-2 mixer approximated). Shapes
follow the Hugging Face modeling code: a gated MLP
(gate, up, down: 3 matrices of `intermediate_size`), untied or tied embeddings, GQA
`num_key_value_heads`, an explicit `head_dim` where given, MoE experts and shared experts,
MLA low-rank projections and the latent KV cache.

>>> m = load_model("llama-3.1-8b")
>>> round(m.total_params / 1e9, 2), m.kv_elements_per_token_per_layer
(8.03, 2048)
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from ridgeline.errors import RidgelineError
from ridgeline.inputs import load_json
from ridgeline.specs.families import parse_family
from ridgeline.specs.model_spec import (
    DENSE_TYPES,
    HYBRID_TYPES,
    MLA_TYPES,
    MOE_TYPES,
    SUPPORTED_TYPES,
    TYPE_ALIASES,
    WRAPPER_TYPES,
    ModelSpec,
    _check_spec,
)

# ModelSpec and the family tables live in specs/model_spec.py; importing them from here
# keeps working.
__all__ = ["DENSE_TYPES", "HYBRID_TYPES", "MLA_TYPES", "MOE_TYPES", "SUPPORTED_TYPES",
           "TYPE_ALIASES", "WRAPPER_TYPES", "ModelSpec", "from_hf_config", "load_model",
           "model_catalog"]


def from_hf_config(cfg: dict[str, Any], name: str | None = None) -> ModelSpec:
    """Build a ModelSpec from a parsed Hugging Face config.json dict (validated: every
    problem is a one-line RidgelineError naming the field and what is allowed)."""
    if not isinstance(cfg, dict):
        raise RidgelineError(f"config.json: got a JSON {type(cfg).__name__}; allowed: a JSON "
                             "object of Hugging Face config fields ({\"model_type\": ...})")
    return _check_spec(_from_hf_config(_language_config(cfg), name))


def _language_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The language model's config: a multimodal wrapper's `text_config` (with the
    wrapper's quantization_config and name), else the config itself."""
    outer = cfg.get("model_type")
    text = cfg.get("text_config")
    if text is not None and not isinstance(text, dict):
        raise RidgelineError(f"config.json: field 'text_config': got {type(text).__name__}; "
                             "allowed: the language model's config object")
    if isinstance(outer, str) and outer in WRAPPER_TYPES and not isinstance(text, dict):
        return {**cfg, "model_type": WRAPPER_TYPES[outer]}  # flat VL configs (Qwen2-VL)
    if not isinstance(text, dict):
        return cfg
    inner = dict(text)
    if not isinstance(inner.get("model_type"), str) or inner["model_type"] not in \
            SUPPORTED_TYPES + tuple(TYPE_ALIASES):
        mapped = WRAPPER_TYPES.get(outer) if isinstance(outer, str) else None
        if mapped is None and isinstance(inner.get("model_type"), str):
            mapped = WRAPPER_TYPES.get(inner["model_type"])
        if mapped is not None:
            inner["model_type"] = mapped
    for key in ("quantization_config", "_name_or_path", "torch_dtype", "tie_word_embeddings"):
        if key in cfg and key not in inner:
            inner[key] = cfg[key]
    return inner


def _from_hf_config(cfg: dict[str, Any], name: str | None) -> ModelSpec:
    """One parser per family (specs/families.py), chosen by model_type or architecture."""
    return parse_family(cfg, name)


def _catalog_dir() -> Any:
    return resources.files("ridgeline.specs").joinpath("data", "models")


def model_catalog() -> dict[str, dict[str, Any]]:
    """Catalog name -> raw config dict (HF config.json values plus `_source`)."""
    out: dict[str, dict[str, Any]] = {}
    for entry in sorted(_catalog_dir().iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".json"):
            out[entry.name[:-5]] = json.loads(entry.read_text())
    return out


def _read_json(path: Path) -> Any:
    # the one safe reader (regular files only, a size cap, UTF-8, bounded nesting)
    return load_json(path, "model", max_bytes=16 << 20)


def _with_modelopt(cfg: Any, path: Path) -> Any:
    """A ModelOpt checkpoint keeps its quantization in hf_quant_config.json next to
    config.json: fold it in when config.json has none."""
    extra = path.with_name("hf_quant_config.json")
    if isinstance(cfg, dict) and "quantization_config" not in cfg and extra.is_file():
        return {**cfg, "quantization_config": _read_json(extra)}
    return cfg


def _hub_config(repo_id: str) -> Path | None:
    """config.json of a Hugging Face repo id: the local cache first (works offline), then
    a download (None when huggingface_hub, the optional `tokenizer` extra, is missing)."""
    try:
        from huggingface_hub import hf_hub_download, try_to_load_from_cache
    except ImportError:
        return None
    import logging

    cached = try_to_load_from_cache(repo_id, "config.json")
    if isinstance(cached, str):
        return Path(cached)
    hub_log = logging.getLogger("huggingface_hub")
    level = hub_log.level
    hub_log.setLevel(logging.ERROR)  # the error line below says it once (cli.md contract)
    try:
        return Path(hf_hub_download(repo_id, "config.json"))
    except Exception as exc:  # offline, gated, unknown repo: one line, the hub's reason
        text = " ".join(str(exc).split())
        why = f"{type(exc).__name__}: {text.split('. ')[0][:120]}" if text else \
            type(exc).__name__
        raise RidgelineError(f"model: {repo_id!r} is not in the local Hugging Face cache and "
                             f"could not be downloaded ({why}); allowed: a catalog name, a "
                             "config.json path, or a cached/reachable hub id") from None
    finally:
        hub_log.setLevel(level)


def load_model(name_or_path: str) -> ModelSpec:
    """A catalog model name (see `ridgeline models`), a path to a HF config.json (or its
    folder), or a Hugging Face id `org/name` (resolved through huggingface_hub's cache)."""
    path = Path(name_or_path)
    if path.suffix == ".json" or path.is_file() or path.is_dir():
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise RidgelineError(f"model: file {str(path)!r} not found")
        cfg = _with_modelopt(_read_json(path), path)
        name = (path.parent.name or path.stem) if path.name == "config.json" else path.stem
        return from_hf_config(cfg, name=name)
    key = name_or_path.lower()
    entry = _catalog_dir().joinpath(f"{key}.json")
    if not entry.is_file():
        hub = _hub_config(name_or_path) if name_or_path.count("/") == 1 else None
        if hub is not None:
            return from_hf_config(_with_modelopt(_read_json(hub), hub), name=name_or_path)
        names = ", ".join(sorted(model_catalog()))
        hint = (" (a Hugging Face id needs huggingface_hub: pip install "
                "'ridgeline[tokenizer]')" if name_or_path.count("/") == 1 else "")
        raise RidgelineError(f"model: got {name_or_path!r}; allowed: a config.json path, a "
                             f"Hugging Face id, or one of {names}{hint}")
    return from_hf_config(json.loads(entry.read_text()), name=key)
