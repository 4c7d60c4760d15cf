"""targets.lock keeps a local image reference relative to the queue directory: every working
directory, `--queue` and the Python API reach the same image (docs/targets-lock.md)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from imgquilt.errors import BadImage
from imgquilt.sources import ref_for_lock, ref_in_queue
from support.qtools import REPO, copy_demo_queue, imgquilt


@pytest.fixture
def world(tmp_path: Path):
    q = copy_demo_queue(tmp_path / "q")
    images = tmp_path / "images"
    images.mkdir()
    shutil.copytree(REPO / "examples/demo-image", images / "demo")
    return tmp_path, q, images


def ref_line(q: Path) -> str:
    return next(ln for ln in (q / "targets.lock").read_text().splitlines() if ln.startswith("ref = "))


def test_a_lock_made_from_another_directory_is_reached_from_everywhere(world, cli_env, monkeypatch) -> None:
    tmp, q, images = world
    imgquilt("--queue", "q", "lock", "--image", "oci:images/demo:latest", cwd=tmp, env=cli_env, check=0)
    assert ref_line(q) == 'ref = "oci:../images/demo:latest"'
    for cwd, args in ((q, []), (q / "patches", []), (Path("/"), ["--queue", str(q)]), (tmp, ["--queue", "q"])):
        r = imgquilt(*args, "apply", cwd=cwd, env=cli_env, check=0)
        assert "Verified 6 patch(es)" in r.out, cwd
    from imgquilt import api

    for cwd, queue in ((tmp, "q"), (q / "patches", None), (Path("/"), str(q))):
        monkeypatch.chdir(cwd)
        monkeypatch.delenv("IMGQUILT_QUEUE", raising=False)
        done = api.apply(queue)
        assert done.result.info.digest == "sha256:6bb1322e12565ffb0282c7a19388ae882ec84b3450af838ace17f722de1daab8"
        assert api.audit(queue).report is not None
    # the work tree reads its bases from the same place (a push from patches/)
    imgquilt("push", cwd=q / "patches", env=cli_env, check=0)


def test_a_lock_from_before_keeps_working_where_it_did_and_says_where_it_looked(world, cli_env) -> None:
    tmp, q, images = world
    imgquilt("lock", "--image", "oci:examples/demo-image:latest", cwd=q, env=cli_env, check=0)
    lock = q / "targets.lock"
    # as an older imgquilt wrote it: relative to the directory `lock` ran in (tmp), not to the queue
    lock.write_text(lock.read_text().replace('ref = "oci:examples/demo-image:latest"', 'ref = "oci:images/demo:latest"'))
    imgquilt("--queue", "q", "apply", cwd=tmp, env=cli_env, check=0)
    r = imgquilt("apply", cwd=q, env=cli_env, check=6)
    assert "targets.lock pins the image 'oci:images/demo:latest'" in r.err
    assert f"relative to the queue directory, {q}" in r.err and str(q / "images/demo") in r.err
    # the next lock stores it relative to the queue
    imgquilt("--queue", "q", "lock", cwd=tmp, env=cli_env, check=0)
    assert ref_line(q) == 'ref = "oci:../images/demo:latest"'


def test_rebase_writes_the_new_image_relative_to_the_queue(world, cli_env) -> None:
    tmp, q, images = world
    imgquilt("--queue", "q", "rebase", "--image", "oci:images/demo:latest", cwd=tmp, env=cli_env, check=0)
    assert ref_line(q) == 'ref = "oci:../images/demo:latest"'
    imgquilt("apply", cwd=q / "patches", env=cli_env, check=0)


def test_which_references_are_rewritten(tmp_path: Path, monkeypatch) -> None:
    q = tmp_path / "q"
    (q / "img").mkdir(parents=True)
    (tmp_path / "other").mkdir()
    (tmp_path / "a.tar").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    assert ref_for_lock("oci:q/img:v1", q) == "oci:img:v1"
    assert ref_for_lock(f"oci:{q}/img@sha256:{'a' * 64}", q) == f"oci:img@sha256:{'a' * 64}"  # absolute inside the queue
    assert ref_for_lock(f"rootfs:{tmp_path}/other", q) == f"rootfs:{tmp_path}/other"  # absolute outside: as given
    assert ref_for_lock("docker-archive:a.tar:app:v1", q) == "docker-archive:../a.tar:app:v1"
    assert ref_for_lock("other", q) == "../other"  # a bare path
    for ref in ("docker://reg.example.org/app:1", "containers-storage:app:1"):
        assert ref_for_lock(ref, q) == ref
    monkeypatch.chdir(q)
    assert ref_in_queue("oci:img:v1", q) == "oci:img:v1"
    monkeypatch.chdir(tmp_path / "other")
    assert ref_in_queue("oci:img:v1", q) == f"oci:{os.path.relpath(q / 'img')}:v1"
    with pytest.raises(BadImage, match="does not exist"):
        ref_in_queue("oci:nowhere:v1", q)


def test_a_malformed_lock_says_what_is_wrong_in_words_not_a_python_class() -> None:
    """A hand-broken lock: the message names the missing key or the bad value, not `KeyError: 'image'`."""
    from imgquilt.errors import MalformedLock
    from imgquilt.queue.lock import parse_lock_file

    cases = {b"version = 1\n[profile.a]\nselect = []\n": "a required key, 'image', is missing",
             b'version = 1\nimage = {ref = "oci:x"}\n': "a required key, 'series_sha256', is missing",
             b"version = 1\nimage = 3\n": "[image] must be a table"}
    for doc, words in cases.items():
        with pytest.raises(MalformedLock) as err:
            parse_lock_file(doc)
        assert words in err.value.message and "Error:" not in err.value.message, err.value.message
        assert err.value.exit_code == 6 and "imgquilt lock" in (err.value.hint or "")


def test_a_lock_of_another_version_type_or_with_a_target_pinned_twice_is_malformed(tmp_path: Path, cli_env) -> None:
    """`version = 1.0` or `true` is no version 1 (TOML keeps the types), and a path pinned twice leaves
    which pin holds to chance: both are MalformedLock (exit 6), in `check` as in `apply`."""
    from imgquilt.errors import MalformedLock
    from imgquilt.queue.lock import parse_lock_file

    q = copy_demo_queue(tmp_path / "q")
    good = (q / "targets.lock").read_text()
    parse_lock_file(good.encode())
    first = good.index("[[target]]")
    end = good.find("[[target]]", first + 1)
    twice = good + "\n" + good[first:end if end > 0 else len(good)]
    for text, words in ((good.replace("version = 1\n", "version = 1.0\n", 1), "unsupported version"),
                        (good.replace("version = 1\n", "version = true\n", 1), "unsupported version"),
                        (twice, "is pinned twice")):
        with pytest.raises(MalformedLock, match=words):
            parse_lock_file(text.encode())
        (q / "targets.lock").write_text(text)
        r = imgquilt("check", cwd=q, env=cli_env, check=6)
        assert words in r.err or words in r.out
