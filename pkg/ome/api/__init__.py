"""Typed views of OME's CRDs, and the label, annotation and finalizer names. No I/O."""
