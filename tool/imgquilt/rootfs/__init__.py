"""Extracted filesystems: safe reads and atomic in-place writes that never leave the root."""
