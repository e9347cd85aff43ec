"""``python -m arkhon_rheo``: the ``arkhon-rheo`` command line (see `arkhon_rheo.cli`)."""

from __future__ import annotations

import sys

from .cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
