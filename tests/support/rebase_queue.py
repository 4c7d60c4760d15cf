"""The rebase tests' roots and queue: site-packages files of two Python versions and the patches on them."""

from __future__ import annotations

from pathlib import Path

from support.qtools import write_patch

SITE311 = "usr/local/lib/python3.11/site-packages/vllm"


SITE312 = "usr/local/lib/python3.12/site-packages/vllm"


WEIGHTS = "model_loader/weights.py"


ENVS = "envs.py"


SHARD_LOG = "model_loader/shard_log.py"


WEIGHTS_V1 = b'''# SPDX-License-Identifier: Apache-2.0
"""Load model weights from local shards, checking their digests on request."""
from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

logger = logging.getLogger(__name__)

DEFAULT_CHUNK_SIZE = 1 << 20
SHARD_INDEX = "model.safetensors.index.json"


@dataclass(frozen=True)
class ShardSpec:
    """One shard file and the tensors it holds."""

    path: Path
    tensors: tuple[str, ...] = field(default_factory=tuple)
    sha256: str | None = None

    @property
    def name(self) -> str:
        return self.path.name


class LoaderError(RuntimeError):
    """Raised when a checkpoint cannot be read."""


def read_index(model_dir: Path) -> dict[str, str]:
    """Map every tensor name to the shard file that holds it."""
    index_file = model_dir / SHARD_INDEX
    if not index_file.exists():
        return {}
    with index_file.open("r", encoding="utf-8") as f:
        doc = json.load(f)
    return dict(doc.get("weight_map", {}))


def list_shards(model_dir: Path) -> list[ShardSpec]:
    """Every shard of a checkpoint, in a stable order."""
    weight_map = read_index(model_dir)
    by_file: dict[str, list[str]] = {}
    for tensor, filename in weight_map.items():
        by_file.setdefault(filename, []).append(tensor)
    if not by_file:
        by_file = {p.name: [] for p in model_dir.glob("*.safetensors")}
    return [
        ShardSpec(model_dir / name, tuple(sorted(tensors)))
        for name, tensors in sorted(by_file.items())
    ]


def _digest(path: Path, chunk_size: int = DEFAULT_CHUNK_SIZE) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(chunk_size), b""):
            h.update(chunk)
    return h.hexdigest()


def verify_shard(shard: ShardSpec) -> None:
    """Check a shard against its recorded digest, when there is one."""
    if shard.sha256 is None:
        return
    actual = _digest(shard.path)
    if actual != shard.sha256:
        raise LoaderError(f"{shard.name}: sha256 {actual}, expected {shard.sha256}")


def iter_shards(model_dir: Path, *, verify: bool = False) -> Iterator[ShardSpec]:
    """Yield shards one by one, verifying them first when asked."""
    shards = list_shards(model_dir)
    if not shards:
        raise LoaderError(f"no weights found in {model_dir}")
    for shard in shards:
        if verify:
            verify_shard(shard)
        logger.debug("loading shard %s", shard.name)
        yield shard


def load_checkpoint(model_dir: str | os.PathLike[str], *, verify: bool = False) -> list[ShardSpec]:
    """Load every shard of a checkpoint directory."""
    root = Path(model_dir)
    if not root.is_dir():
        raise LoaderError(f"{root} is not a directory")
    loaded = []
    for shard in iter_shards(root, verify=verify):
        loaded.append(shard)
    logger.info("loaded %d shards from %s", len(loaded), root)
    return loaded
'''


ENVS_V1 = b"""import os

VLLM_LOGGING_LEVEL = os.getenv("VLLM_LOGGING_LEVEL", "INFO")
VLLM_WORKER_MULTIPROC_METHOD = os.getenv("VLLM_WORKER_MULTIPROC_METHOD", "fork")
VLLM_USE_V1 = os.getenv("VLLM_USE_V1", "1") == "1"
"""


# the queue's changes
DEBUG_LINE = b'logger.debug("loading shard %s", shard.name)'


INFO_LINE = b'logger.info("loading shard %s (%d tensors)", shard.name, len(shard.tensors))'


LOADED_LINE = b'logger.info("loaded %d shards from %s", len(loaded), root)'


LOADED_VERIFY = b'logger.info("loaded %d shards from %s (verified: %s)", len(loaded), root, verify)'


SHARD_LOG_PY = b'"""Per-shard load log."""\n\nSEEN: list[str] = []\n'


# upstream's next version: lines inserted above the patched region (an import and a helper)
RETRY = b"""def _retry(fn, attempts: int = 3):
    \"\"\"Call fn, retrying transient I/O errors with a short backoff.\"\"\"
    for i in range(attempts - 1):
        try:
            return fn()
        except OSError:
            time.sleep(0.1 * (i + 1))
    return fn()


def iter_shards"""


WEIGHTS_V2 = WEIGHTS_V1.replace(b"import os\n", b"import os\nimport time\n").replace(b"def iter_shards", RETRY, 1)


def patched(data: bytes, *, info: bool = True, verify: bool = False) -> bytes:
    if info:
        data = data.replace(DEBUG_LINE, INFO_LINE)
    if verify:
        data = data.replace(LOADED_LINE, LOADED_VERIFY)
    return data


def make_root(root: Path, weights: bytes, envs: bytes = ENVS_V1, site: str = SITE311) -> Path:
    for rel, data in ((WEIGHTS, weights), (ENVS, envs)):
        p = root / site / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/os-release").write_bytes(b"ID=debian\n")
    return root


def make_patches(q: Path) -> None:
    """Three patches as a user keeps them: a chain on weights.py, and one on envs.py adding a file."""
    q.mkdir()
    w, e = f"{SITE311}/{WEIGHTS}", f"{SITE311}/{ENVS}"
    write_patch(q, "0001-log-shard-tensors.patch", [(w, WEIGHTS_V1, patched(WEIGHTS_V1))],
                fields={"Description": "Log each shard with its tensor count", "Author": "Platform Team <platform@example.org>"})
    write_patch(q, "0002-log-verify.patch", [(w, patched(WEIGHTS_V1), patched(WEIGHTS_V1, verify=True))],
                fields={"Description": "Say whether shards were verified", "Requires": "0001-log-shard-tensors.patch"})
    write_patch(q, "0003-spawn-workers.patch", [
        (e, ENVS_V1, ENVS_V1.replace(b'"fork"', b'"spawn"')),
        (f"{SITE311}/{SHARD_LOG}", None, SHARD_LOG_PY),
    ], fields={"Description": "Spawn workers; keep a shard log"}, modes={f"{SITE311}/{SHARD_LOG}": 0o644})


def snapshot(q: Path) -> dict[str, bytes]:
    files = {"series": (q / "series").read_bytes(), "targets.lock": (q / "targets.lock").read_bytes()}
    for p in sorted((q / "patches").iterdir()):
        files[f"patches/{p.name}"] = p.read_bytes()
    return files
