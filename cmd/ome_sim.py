"""Thin entry point: ``python cmd/ome_sim.py`` is the ``ome-sim`` console script."""

import sys

from ome_sim.cli import main

if __name__ == "__main__":
    sys.exit(main())
