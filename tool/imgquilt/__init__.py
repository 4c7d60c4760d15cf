"""imgquilt: a quilt-style patch queue for container images."""

__version__ = "0.1.0"
