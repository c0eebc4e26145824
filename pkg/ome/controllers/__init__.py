"""The controllers: decisions about OME's resources, on top of the runtime layer."""
