"""Headless Chromium driven by selenium through chromedriver: Debian's ``chromium`` and
``chromium-driver`` packages (``apt-get install -y chromium chromium-driver``; CI's
``.ci/run`` installs them). Where they or selenium are missing, :func:`missing` says why
and the tests that need a browser skip with that reason.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
#: headless, and quiet on the network: this machine's network is closed, and Chromium's
#: own connections (updates, sync, field trials) would otherwise be refused, slowly
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def missing() -> str | None:
    """Why no browser test can run here, or None when it can."""
    if importlib.util.find_spec("selenium") is None:
        return "selenium is not installed (it is in requirements/lock.txt: ./dev venv)"
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not Path(path).exists() and shutil.which(Path(path).name) is None:
            return (
                f"{path} is missing: install Debian's chromium and chromium-driver "
                "(apt-get install -y chromium chromium-driver; .ci/run does) "
                f"[{package}]"
            )
    return None


def start_chromium(profile: Path, width: int = 1280, height: int = 1000) -> Any:
    """A headless Chromium with a fresh profile in ``profile``; ``quit()`` it."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")
    for flag in (*FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver_path = CHROMEDRIVER if Path(CHROMEDRIVER).exists() else shutil.which("chromedriver")
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    driver.set_page_load_timeout(30)
    return driver
