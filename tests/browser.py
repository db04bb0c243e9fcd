"""Headless Chromium for tests: Debian's `chromium` + `chromium-driver`, driven by Selenium
with the system chromedriver (nothing is downloaded). Skips when missing, fails under CI."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1300,1000")


def chromium(tmp_path: Path) -> Any:
    """A Selenium Chrome driver on the system browser, or skip (fail when CI=true)."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not (Path(p).exists() or shutil.which(p))]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing.append("selenium (pip install -e '.[test]')")
    if missing:
        msg = "headless Chromium not available: " + ", ".join(missing) + \
              " (apt-get install -y chromium chromium-driver)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for f in FLAGS:
        opts.add_argument(f)
    opts.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)


def console_errors(driver: Any) -> list[str]:
    """Console messages of level SEVERE (errors, failed loads, CSP violations)."""
    return [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
