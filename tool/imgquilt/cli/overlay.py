"""`overlay-args`: an overlay's mounts.tsv as podman or docker arguments, or Kubernetes volumes. Parse, call, render."""
from __future__ import annotations

import json
import shlex
from enum import Enum
from pathlib import Path

import typer

from .common import G, emit_json, say


class MountFormat(str, Enum):
    podman = "podman"
    docker = "docker"
    k8s = "k8s"


def overlay_args_cmd(
    overlay: Path = typer.Argument(..., metavar="OVERLAY", help="A directory `imgquilt apply --overlay` wrote (it holds mounts.tsv)."),
    format: MountFormat = typer.Option(MountFormat.podman, "--format", metavar="podman|docker|k8s",
                                       help="podman: -v HOST:CTR:ro; docker: --mount type=bind,...,readonly; k8s: a pod's volumes and a container's volumeMounts (YAML)."),
) -> None:
    """Print the bind mounts of an overlay for the tool that runs the container.

    podman and docker: one line of arguments, each quoted for the shell when it must be; k8s: the
    `volumeMounts` of a container and the `volumes` of its pod (hostPath, type File), read-only.
    The profile's environment defaults the overlay carries (its env.list) come first, as
    `-e KEY=VALUE` (k8s: the container's `env`).
    With --json: {"args": [...]} or {"volumeMounts": [...], "volumes": [...], "env": [...]}.

    \b
    Examples:
      eval "podman create $(imgquilt overlay-args out/overlay) IMAGE"
      eval "docker run $(imgquilt overlay-args out/overlay --format docker) IMAGE"
      imgquilt overlay-args out/overlay --format k8s >> pod-patch.yaml
    """
    from ..verbs.overlay import overlay_args

    found = overlay_args(overlay, format.value)
    if G.json:
        from .documents import overlay_args_doc

        emit_json(overlay_args_doc(found, format.value))
        return
    if isinstance(found, list):
        say(" ".join(shlex.quote(a) for a in found))
        return
    for key in ("env", "volumeMounts", "volumes"):  # YAML: every scalar as a JSON string (YAML 1.2 reads JSON)
        if key not in found:
            continue
        say(f"{key}:")
        for item in found[key]:
            lines = _yaml(item)
            say("- " + lines[0])
            for ln in lines[1:]:
                say("  " + ln)


def _yaml(doc: dict) -> list[str]:
    out: list[str] = []
    for k, v in doc.items():
        if isinstance(v, dict):
            out.append(f"{k}:")
            out += ["  " + ln for ln in _yaml(v)]
        else:
            out.append(f"{k}: {json.dumps(v)}")
    return out


COMMANDS = {"overlay-args": overlay_args_cmd}
