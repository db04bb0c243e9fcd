"""Where the measured data outside the checkout is, for the accuracy scripts.

`shared_data_dir()`: the environment variable `RIDGELINE_SHARED_DATA` if set, else the
`shared/data` folder beside the repository (`<repository root>/../shared/data`).
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_SHARED_DATA = "RIDGELINE_SHARED_DATA"
REPO_ROOT = Path(__file__).resolve().parents[2]


def shared_data_dir() -> Path:
    env = os.environ.get(ENV_SHARED_DATA)
    return Path(env) if env else REPO_ROOT.parent / "shared" / "data"
