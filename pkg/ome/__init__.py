"""OME on-demand TPU slice provisioning for OMENative inference services.

Product code lives in the subpackages beside ``ome.sim``; ``ome.sim`` is the test and demo
environment (embedded API server, provider simulator) and is never imported by product code.
"""
