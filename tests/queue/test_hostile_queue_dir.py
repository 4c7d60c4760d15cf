"""A queue directory is untrusted input (people clone them): links planted in `.imgquilt/`.

`.imgquilt`, `.imgquilt/work`, `.imgquilt/objects`, `.imgquilt/state`, `.imgquilt/cache`, ... or a link
inside them where imgquilt writes: every one is refused with exit 6 naming it, and the directory it
points at (a $HOME-like canary) hashes the same afterwards.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from support.hostile import CONF, NEW_CONF, canary_dir, refused, run, small_root, unchanged
from support.qtools import write_patch

KEY = b"ssh-ed25519 AAAA attacker\n"

# where the link sits (relative to the queue) -> what it points at, relative to the canary home
LINKS = {
    ".imgquilt": "",
    ".imgquilt/work": "",
    ".imgquilt/objects": "",
    ".imgquilt/state": "",
    ".imgquilt/state/pc": "",
    ".imgquilt/work/.ssh": ".ssh",
    ".imgquilt/state/applied": "notes.txt",
    ".imgquilt/cache": "",
    ".imgquilt/cache/verified": "",
}


def _queue(tmp: Path) -> tuple[Path, Path]:
    root = small_root(tmp / "img")
    q = tmp / "q"
    write_patch(q, "0001-key.patch", [(".ssh/authorized_keys", None, KEY), ("etc/app.conf", CONF, NEW_CONF)])
    return q, root


def _plant(q: Path, home: Path, where: str, to: str) -> None:
    link = q / where
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(home / to if to else home, link)


@pytest.mark.parametrize("where", sorted(LINKS))
def test_push_never_writes_through_a_planted_link(tmp_path: Path, cli_env: dict[str, str], where: str) -> None:
    q, root = _queue(tmp_path)
    home = canary_dir(tmp_path)
    _plant(q, home, where, LINKS[where])
    with unchanged(home, root):
        r = run(q, "push", "-i", f"rootfs:{root}", env=cli_env)
        if where.startswith(".imgquilt/cache"):
            # push reads bases from a rootfs: the cache is not needed, so it is never touched
            assert r.code in (0, 6), r.out + r.err
        else:
            refused(r, 6, where.split("/")[-1], "does not follow")
            applied = q / ".imgquilt/state/applied"  # nothing half-done: the push did not happen
            assert applied.is_symlink() or not applied.exists() or applied.read_bytes() == b""
            assert not [p for p in q.rglob("*imgquilt-tmp*")]
    assert not (home / ".ssh/authorized_keys").exists()


@pytest.mark.parametrize("where", [".imgquilt", ".imgquilt/objects"])
def test_apply_layer_never_fills_a_linked_store(tmp_path: Path, cli_env: dict[str, str], where: str) -> None:
    q, root = _queue(tmp_path)
    home = canary_dir(tmp_path)
    _plant(q, home, where, "")
    with unchanged(home, root):
        r = run(q, "apply", "--image", f"rootfs:{root}", "--layer", str(tmp_path / "fix.tar"), env=cli_env)
        refused(r, 6, where, "symlink")
    assert not (tmp_path / "fix.tar").exists()


@pytest.mark.parametrize("where", [".imgquilt", ".imgquilt/state", ".imgquilt/work", ".imgquilt/objects"])
def test_new_and_add_never_write_through_a_link(tmp_path: Path, cli_env: dict[str, str], where: str) -> None:
    root = small_root(tmp_path / "img")
    q = tmp_path / "q"
    q.mkdir()
    (q / "series").write_bytes(b"")
    home = canary_dir(tmp_path)
    _plant(q, home, where, "")
    with unchanged(home, root):
        r = run(q, "new", "0001-x.patch", env=cli_env)
        if r.code == 0:  # `new` itself may touch no state; `add` must then refuse
            r = run(q, "add", "-i", f"rootfs:{root}", "etc/app.conf", env=cli_env)
        refused(r, 6, where, "symlink")


def test_rebase_state_link_is_refused(tmp_path: Path, cli_env: dict[str, str]) -> None:
    q, root = _queue(tmp_path)
    home = canary_dir(tmp_path)
    _plant(q, home, ".imgquilt/rebase", "")
    (home / "state.json").write_bytes(b"{}")
    with unchanged(home, root):
        for args in (["rebase", "--abort"], ["rebase", "--continue"], ["rebase", "--image", f"rootfs:{root}"], ["new", "0002-y.patch"]):
            refused(run(q, *args, env=cli_env), 6, ".imgquilt/rebase", "symlink")


def test_fifo_in_state_is_refused_without_hanging(tmp_path: Path, cli_env: dict[str, str]) -> None:
    q, root = _queue(tmp_path)
    (q / ".imgquilt/state").mkdir(parents=True)
    os.mkfifo(q / ".imgquilt/state/applied")
    refused(run(q, "applied", env=cli_env), 6, "applied", "not a regular file")


@pytest.mark.parametrize("where", [".imgquilt/cache", ".imgquilt/cache/verified"])
def test_image_apply_refuses_a_linked_cache(tmp_path: Path, cli_env: dict[str, str], where: str) -> None:
    from support.imagetools import build_oci, dir_, file

    layout = build_oci(tmp_path / "img", [[dir_("etc"), file("etc/app.conf", CONF)]], compression=None)
    q = tmp_path / "q"
    write_patch(q, "0001-conf.patch", [("etc/app.conf", CONF, NEW_CONF)])
    home = canary_dir(tmp_path)
    _plant(q, home, where, "")
    with unchanged(home, layout):
        refused(run(q, "apply", "--image", f"oci:{layout}:latest", env=cli_env), 6, where, "symlink")


@pytest.mark.parametrize("kind", ["fifo", "symlink"])
@pytest.mark.parametrize("cache", ["queue", "shared"])
def test_planted_verified_markers_are_never_followed(tmp_path: Path, cli_env: dict[str, str], kind: str, cache: str) -> None:
    """Markers live in the shared cache, or (IMGQUILT_NO_CACHE=1) in the queue's own .imgquilt/cache/."""
    from support.imagetools import build_oci, dir_, file

    layout = build_oci(tmp_path / "img", [[dir_("etc"), file("etc/app.conf", CONF)]], compression=None)
    q = tmp_path / "q"
    write_patch(q, "0001-conf.patch", [("etc/app.conf", CONF, NEW_CONF)])
    home = canary_dir(tmp_path)
    if cache == "queue":
        cli_env = {**cli_env, "IMGQUILT_NO_CACHE": "1"}
    assert run(q, "apply", "--image", f"oci:{layout}:latest", env=cli_env).code == 0
    where = q / ".imgquilt/cache/verified" if cache == "queue" else Path(cli_env["IMGQUILT_CACHE_DIR"]) / "verified"
    markers = list(where.iterdir())
    assert markers
    for m in markers:
        m.unlink()
        os.mkfifo(m) if kind == "fifo" else os.symlink(home / "notes.txt", m)
    with unchanged(home, layout):
        r = run(q, "apply", "--image", f"oci:{layout}:latest", env=cli_env)  # a FIFO would hang a plain read
        assert r.code == 0, r.out + r.err


def test_a_damaged_snapshot_says_what_is_wrong_in_words(tmp_path: Path, cli_env: dict[str, str]) -> None:
    """A pushed patch's snapshot (.imgquilt/state/pc/NAME.json) edited by hand: exit 6 naming the key
    or the value, not a Python exception's repr (`KeyError('mode')`)."""
    q, root = _queue(tmp_path)
    assert run(q, "push", "-i", f"rootfs:{root}", env=cli_env).code == 0
    (snap,) = (q / ".imgquilt/state/pc").iterdir()
    snap.write_text('{"files": [{"path": "etc/app.conf", "sha256": "00"}]}')
    r = run(q, "pop", env=cli_env)
    refused(r, 6, "a required key, 'mode', is missing")
    assert "KeyError" not in r.err
