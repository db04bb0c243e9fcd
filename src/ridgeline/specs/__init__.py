"""Specs: model (HF config.json), hardware, precision, parallelism. Cheap to import."""

from ridgeline.specs.hardware import HardwareSpec, hardware_catalog, load_hardware
from ridgeline.specs.model import ModelSpec, from_hf_config, load_model, model_catalog
from ridgeline.specs.parallel import Parallelism
from ridgeline.specs.precision import Precision, resolve_precision

__all__ = [
    "HardwareSpec",
    "ModelSpec",
    "Parallelism",
    "Precision",
    "from_hf_config",
    "hardware_catalog",
    "load_hardware",
    "load_model",
    "model_catalog",
    "resolve_precision",
]
