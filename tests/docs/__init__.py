"""Tests of the documentation site, and the tooling it is built with."""

from pathlib import Path

#: The packages with an API page of their own (``docs/reference/api/NAME.md``).
PACKAGES = sorted(
    page.stem
    for page in (Path(__file__).resolve().parents[2] / "docs" / "reference" / "api").glob("*.md")
    if page.stem != "index"
)
