"""``kubectl ome``: the operator's view of OMENative Instances and their TPU slices.

``plugin`` parses the command line and reads the cluster; ``instance`` and ``slices`` build
what is printed from plain values (pure: no I/O, no client, ``now`` given); ``render`` lays
it out as kubectl does. It writes nothing to the cluster.
"""
