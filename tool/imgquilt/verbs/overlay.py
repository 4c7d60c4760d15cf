"""`overlay-args`: an overlay directory's mounts and environment as a container engine's arguments."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import UsageError


def overlay_args(overlay: str | os.PathLike[str], format: str = "podman") -> list[str] | dict[str, list[dict]]:
    """An overlay's mounts.tsv as `podman` (-v HOST:CTR:ro) or `docker` (--mount ...) arguments, or as
    a Kubernetes pod's `volumes` and container's `volumeMounts` (`k8s`), with its env.list's defaults
    (`-e KEY=VALUE` first; k8s: `env`). Reads no queue."""
    from ..image.sinks.overlay import MOUNT_FORMATS, env_args, k8s_volumes, mount_args, read_env, read_mounts

    if format not in MOUNT_FORMATS:
        raise UsageError(f"Unknown format {format!r}: use one of {', '.join(MOUNT_FORMATS)}.")
    mounts, env = read_mounts(Path(overlay)), read_env(Path(overlay))
    return k8s_volumes(mounts, env) if format == "k8s" else env_args(env) + mount_args(mounts, format)
