"""The system's headless Chromium for the browser tests (nothing is downloaded).

``CHROMIUM``/``CHROMEDRIVER`` are the binaries found on this machine (``None`` when
missing: the tests skip with ``NO_CHROMIUM``); `chromium` drives one instance.
"""

from __future__ import annotations

import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator


def _find(*names: str) -> str | None:
    for name in names:
        found = shutil.which(name) or (name if Path(name).is_file() else None)
        if found:
            return found
    return None


CHROMIUM = _find("chromium", "chromium-browser", "/usr/bin/chromium")
CHROMEDRIVER = _find("chromedriver", "/usr/bin/chromedriver")

NO_CHROMIUM = "no system chromium and chromedriver (apt-get install chromium chromium-driver)"


@contextmanager
def chromium(user_data_dir: Path) -> Iterator[Any]:
    """A headless Chromium through selenium, quit on exit (selenium must be importable)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1400,1000",
        f"--user-data-dir={user_data_dir}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()
