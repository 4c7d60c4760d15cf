"""What skopeo and podman print on stderr, without logrus's framing: one reader for the sources, the
sinks and the store resolution (image.containers_store), so none of them imports another for it."""
from __future__ import annotations

import re

_LOGRUS = re.compile(r'level=(?:fatal|error)\s+msg="((?:[^"\\]|\\.)*)"')


def skopeo_message(stderr: str) -> str:
    """What skopeo said, without its log framing (`time=... level=fatal msg="..."`): the last error's text."""
    found = _LOGRUS.findall(stderr)
    if found:
        return found[-1].replace('\\"', '"').replace("\\\\", "\\").rstrip(".")
    return " ".join(stderr.strip().splitlines()[-3:]).rstrip(".")
