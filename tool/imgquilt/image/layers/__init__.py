"""Layers as read: blob streams and compression, the tar walk, the per-layer index, the merged view."""
