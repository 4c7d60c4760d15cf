"""The image's filesystem as the runtime merges its layers, over the layers scanned so far.

Rules (overlayfs, which is what a container sees at run time):
- the topmost layer that has a path decides what it is;
- `.wh.NAME` hides NAME, and everything under it, in the layers below its own;
- `.wh..wh..opq` in a directory hides that directory's content in the layers below;
- a layer that has a non-directory where lower layers have a directory (or a symlink where they
  have a directory) hides the lower content under that path; a directory in an upper layer over a
  non-directory below replaces it;
- a directory that exists in a layer only because members lie under it takes its metadata from
  the topmost layer that has it explicitly (containerd's behaviour), or 0755 root:root if none does.

Layers are scanned top-down, so a lookup can also answer UNKNOWN: nothing scanned decides the
path and lower layers are still unread. Callers stop scanning once nothing they need is UNKNOWN.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .layer_index import DIR, LayerIndex, Rec

DEFAULT_DIR = Rec(DIR, 0o755, 0, 0, 0, "", -1, -1, False)


@dataclass(frozen=True)
class Deletion:
    """Why a path is absent although a layer may have had it: the layer and member that hide it."""

    path: str  # the path looked up
    layer: int  # position from the top
    marker: str  # the member that hides it (.wh.NAME, .wh..wh..opq, or the non-directory)
    how: Literal["whiteout", "opaque", "replaced"]


@dataclass(frozen=True)
class Found:
    layer: int  # position from the top (-1: a directory no layer describes)
    rec: Rec


@dataclass(frozen=True)
class Absent:
    hidden: Deletion | None


class _Unknown:
    def __repr__(self) -> str:  # pragma: no cover
        return "UNKNOWN"


UNKNOWN = _Unknown()
Lookup = Found | Absent | _Unknown


def _ancestors(path: str) -> list[str]:
    """Proper ancestors, nearest last, the root ("") first."""
    out = [""]
    idx = path.find("/")
    while idx >= 0:
        out.append(path[:idx])
        idx = path.find("/", idx + 1)
    return out


def hider(layer: LayerIndex, path: str, ancestors: list[str]) -> Deletion | None:
    """What in `layer` hides `path` from the layers below it, if anything."""
    marker = layer.whiteouts.get(path)
    if marker is not None:
        return Deletion(path, layer.position, marker, "whiteout")
    for anc in ancestors:
        if anc:
            marker = layer.whiteouts.get(anc)
            if marker is not None:
                return Deletion(path, layer.position, marker, "whiteout")
            rec = layer.entries.get(anc)
            if rec is not None and rec.kind != DIR:
                return Deletion(path, layer.position, anc, "replaced")
        marker = layer.opaque.get(anc)
        if marker is not None:
            return Deletion(path, layer.position, marker, "opaque")
    return None


class MergedView:
    """Lookups over layers[0:scanned] (top first) of an image with `total` layers."""

    def __init__(self, total: int, *, whiteouts: bool = True) -> None:
        self.total = total
        self.layers: list[LayerIndex] = []
        self.whiteouts = whiteouts
        # answers as of the layers added so far: a path's answer changes only when a layer is added, and
        # the same directories are looked up for every file under them (1000 targets: ~30k lookups)
        self._answers: dict[str, Lookup] = {}

    @property
    def scanned(self) -> int:
        return len(self.layers)

    @property
    def complete(self) -> bool:
        return len(self.layers) == self.total

    def add(self, layer: LayerIndex) -> None:
        assert layer.position == len(self.layers)
        self.layers.append(layer)
        self._answers = {}

    def lookup(self, path: str, *, start: int = 0, before: int | None = None) -> Lookup:
        """The entry at `path` (parents already resolved, no symlink among them).

        `start`/`before`: look as of layer `start` when its member number `before` is applied
        (what a hard link in that layer refers to).
        """
        if start == 0 and before is None:
            answer = self._answers.get(path)
            if answer is None:
                answer = self._answers[path] = self._lookup(path, 0, None)
            return answer
        return self._lookup(path, start, before)

    def _lookup(self, path: str, start: int, before: int | None) -> Lookup:
        ancestors = _ancestors(path)
        implicit_at: int | None = None
        for i in range(start, self.total):
            if i >= len(self.layers):
                return UNKNOWN
            layer = self.layers[i]
            rec = layer.entries.get(path)
            if rec is not None and before is not None and i == start and rec.ordinal >= before:
                rec = None  # added after the hard link: not what it refers to
            if rec is not None:
                if rec.kind == DIR or implicit_at is None:
                    return Found(i, rec)
                return Found(implicit_at, DEFAULT_DIR)  # an upper directory over this non-directory
            if implicit_at is None and path in layer.implicit:
                implicit_at = i
            hidden = hider(layer, path, ancestors) if self.whiteouts else None
            if hidden is not None:
                return Absent(hidden) if implicit_at is None else Found(implicit_at, DEFAULT_DIR)
        return Absent(None) if implicit_at is None else Found(implicit_at, DEFAULT_DIR)
