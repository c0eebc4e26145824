"""Not product code: the embedded Kubernetes API server and the GKE provider simulator.

Product modules never import anything from here; ``test/test_layering.py`` checks that.
"""
