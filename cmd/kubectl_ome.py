"""Thin entry point: ``python cmd/kubectl_ome.py`` is the ``kubectl-ome`` console script."""

import sys

from ome.cli.plugin import main

if __name__ == "__main__":
    sys.exit(main())
