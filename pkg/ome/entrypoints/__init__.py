"""The programs' main functions (``ome-manager``); ``cmd/`` holds the thin scripts."""
