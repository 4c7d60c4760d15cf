"""`rebase` with no `--from` against a hostile targets.lock (issue 35, point 6): the old bases come
from the image the lock names, so its reference and its pins are the attacker's. Whatever they hold,
no exit 1, every output escaped, nothing written outside the queue, and a pin is never obeyed: the
old bases must verify against the queue's own patches, and a finished rebase writes a fresh lock.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from support.hostile import canary_dir, unchanged
from support.qtools import empty_queue, imgquilt, write_patch

OLD = b"".join(b"line %d\n" % i for i in range(30))
NEW = OLD.replace(b"line 25\n", b"line 25 upstream\n")
FIX = OLD.replace(b"line 2\n", b"line 2 fixed\n")


def _ref(to: str):
    return lambda lock, old: lock.replace(f'ref = "rootfs:{old}"', f"ref = {to}")


HOSTILE = {  # name: (edit of the lock, exit code, a word of the message)
    "ref-with-escapes-not-there": (_ref('"rootfs:/nonexistent\\u001b[2J"'), 6, "rootfs:/nonexistent\\x1b[2J: that path is not there"),
    "ref-registry-with-escapes": (_ref('"docker://127.0.0.1:1/x\\u001b[2J:latest"'), 6, "invalid repository name 'x\\x1b[2J'"),
    "ref-the-host-root": (_ref('"rootfs:/"'), 3, "is not the image this queue was made for"),
    "ref-climbing-out": (_ref('"rootfs:../../../../../../.."'), 3, "is not the image this queue was made for"),
    "ref-like-an-option": (_ref('"--src-creds=a:b"'), 6, "that path is not there"),
    "ref-an-option-to-skopeo": (_ref('"docker-daemon:--help"'), 6, "invalid reference format"),
    "ref-empty": (_ref('""'), 6, "ref must be an image reference"),
    "ref-a-number": (_ref("5"), 6, "ref must be an image reference"),
    "digest-with-escapes": (lambda lock, old: re.sub(r'digest = "sha256:[0-9a-f]+"', lambda m: 'digest = "sha256:\\u001b[2J"', lock), 0, "1 merged"),
    "pin-path-climbing-out": (lambda lock, old: lock.replace('"etc/app.conf"', '"../../etc/passwd"'), 0, "1 merged"),
    "pin-hash-with-escapes": (lambda lock, old: re.sub(r'(base|final)_sha256 = "[0-9a-f]+"', lambda m: f'{m.group(1)}_sha256 = "\\u001b[2J"', lock), 0, "1 merged"),
    "platform-with-escapes": (lambda lock, old: lock.replace("[image]", '[image]\nplatform = "linux/\\u001b[2J"'), 0, "1 merged"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_rebase_without_from_never_obeys_a_hostile_lock(tmp_path: Path, cli_env, case: str) -> None:
    edit, code, says = HOSTILE[case]
    old, new = tmp_path / "old", tmp_path / "new"
    for root, data in ((old, OLD), (new, NEW)):
        (root / "etc").mkdir(parents=True)
        (root / "etc/app.conf").write_bytes(data)
    q = empty_queue(tmp_path / "queue")
    write_patch(q, "0001-fix.patch", [("etc/app.conf", OLD, FIX)])
    imgquilt("lock", "--image", f"rootfs:{old}", cwd=q, env=cli_env, check=0)
    shutil.rmtree(q / ".imgquilt")  # no old base in the object store: the rebase must read the image the lock names
    lock = (q / "targets.lock").read_text()
    hostile = edit(lock, old)
    assert hostile != lock
    (q / "targets.lock").write_text(hostile)
    patch = (q / "patches/0001-fix.patch").read_bytes()
    home = canary_dir(tmp_path)
    with unchanged(old, new, home):
        r = imgquilt("rebase", "--image", f"rootfs:{new}", cwd=q, env=cli_env)
    text = r.out + r.err
    assert r.code == code and says in text, (r.code, text)
    assert not [c for c in text if not c.isprintable() and c not in "\n\t"], text
    if code == 0:  # carried onto the new image, and the lock written afresh: nothing of the hostile pin is left
        fresh = (q / "targets.lock").read_text()
        assert f'ref = "rootfs:{new}"' in fresh and "\\u001b" not in fresh and "../" not in fresh, fresh
        assert imgquilt("check", cwd=q, env=cli_env).code == 0
    else:
        assert (q / "targets.lock").read_text() == hostile and (q / "patches/0001-fix.patch").read_bytes() == patch
