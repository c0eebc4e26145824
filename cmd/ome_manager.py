"""Thin entry point: ``python cmd/ome_manager.py`` is the ``ome-manager`` console script."""

import sys

from ome.entrypoints.manager import main

if __name__ == "__main__":
    sys.exit(main())
