"""Filesystem views shared by every source: values, the in-root path resolver, path checks."""
