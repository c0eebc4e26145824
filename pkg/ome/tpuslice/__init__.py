"""The pure core of TPU slice provisioning: shapes, names and configuration.

Plain functions over plain values: no I/O, no Kubernetes client, no provider types.
"""
