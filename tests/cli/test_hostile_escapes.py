"""Terminal escapes from a cloned queue, a hand-edited lock, an image or a registry (issue 35, point 4):
whatever they hold is shown escaped (`\\x1b`, `\\n`), on every output, and an env value that would
hold a control character is refused when declared. Each run is the real console script; a raw ESC
or a line of its own anywhere in stdout or stderr fails the test.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from support.hostile import CONF, NEW_CONF, small_root
from support.imagetools import build_oci, file
from support.qtools import Run, empty_queue, imgquilt, write_patch

NAME = "0001-\x1b[31mred\x1b]0;pwned\x07.patch"  # colour, then a window title set by OSC
SHOWN = "0001-\\x1b[31mred\\x1b]0;pwned\\x07.patch"
GUARD = "g\x1b[2J"  # "clear the screen", as a guard in series (MQ's syntax allows it)


def clean(r: Run) -> str:
    """stdout and stderr of a run, asserted to hold no raw escape or other control character."""
    text = r.out + r.err
    bad = sorted({c for c in text if not c.isprintable() and c not in "\n\t"})
    assert not bad, f"raw control characters {bad!r} in:\n{text!r}"
    return text


@pytest.fixture
def world(tmp_path: Path, cli_env: dict[str, str]) -> tuple[Path, Path, dict[str, str]]:
    """A queue (as cloned) whose one patch is named with escapes, pinned to a small rootfs."""
    root = small_root(tmp_path / "root")
    q = empty_queue(tmp_path / "queue")
    write_patch(q, NAME, [("etc/app.conf", CONF, NEW_CONF)])
    imgquilt("lock", "--image", f"rootfs:{root}", cwd=q, env=cli_env, check=0)
    return q, root, cli_env


def test_a_patch_name_with_escapes_is_shown_escaped_by_series_push_pop_and_apply(world, tmp_path: Path) -> None:
    q, root, env = world
    for args in (("series",), ("series", "-v"), ("push",), ("top",), ("applied",), ("pop",), ("unapplied",),
                 ("next",), ("apply", "--layer", str(tmp_path / "l.tar")), ("apply", "-v", "--layer", str(tmp_path / "m.tar"))):
        r = imgquilt(*args, cwd=q, env=env, check=0)
        assert SHOWN in clean(r), (args, r.out)
    # --json keeps the name exact (JSON escapes it its own way)
    assert json.loads(imgquilt("--json", "series", cwd=q, env=env, check=0).out)["series"] == [NAME]


def test_a_guard_with_escapes_is_shown_escaped_by_guard_list(world) -> None:
    q, _, env = world
    (q / "series").write_text(f"{NAME} #+{GUARD}\n")
    r = imgquilt("guard", "--list", cwd=q, env=env, check=0)
    assert f"{SHOWN}: +g\\x1b[2J" in clean(r)
    clean(imgquilt("series", "-v", cwd=q, env=env, check=0))


def test_an_error_naming_a_patch_shows_it_escaped(world) -> None:
    q, _, env = world
    (q / f"patches/{NAME}").unlink()
    r = imgquilt("push", cwd=q, env=env)
    assert r.code == 6 and SHOWN in clean(r), r.err


def test_a_series_line_given_to_import_is_shown_escaped(world, tmp_path: Path) -> None:
    q, _, env = world
    up = tmp_path / "upstream"
    up.mkdir()
    (up / "series").write_text("fix-\x1b[2J.patch\n")
    r = imgquilt("import", "--series", str(up / "series"), cwd=q, env=env)
    assert r.code == 6 and "fix-\\x1b[2J.patch" in clean(r), r.err


# --- a profile's select and env, from a hand-edited targets.lock ---------------------------------------
@pytest.fixture(scope="module")
def image(tmp_path_factory) -> Path:
    return build_oci(tmp_path_factory.mktemp("image") / "img", [[file("etc/app.conf", CONF)]])


def hand_edited(q: Path, image: Path, env: dict[str, str]) -> None:
    """Profile p declared with the real CLI, then its select and env edited by hand: an ESC in the guard
    it selects, an ESC and a newline in an env value (TOML writes both as escapes, tomllib reads them)."""
    (q / "series").write_text(f"{NAME} #+{GUARD}\n")
    imgquilt("lock", "--profile", "p", "--select", "g", "--image", f"oci:{image}:latest", "--env", "MODE=fast",
             cwd=q, env=env, check=0)
    text = (q / "targets.lock").read_text()
    assert '"g",' in text and 'MODE = "fast"' in text
    (q / "targets.lock").write_text(text.replace('"g",', '"g\\u001b[2J",').replace('MODE = "fast"', 'MODE = "a\\u001b[1mb\\nFAKE=1"'))


def test_a_hand_edited_profile_is_shown_escaped_by_lock_apply_and_audit(world, image: Path, tmp_path: Path) -> None:
    q, _, env = world
    hand_edited(q, image, env)
    r = imgquilt("lock", "--profile", "p", cwd=q, env=env, check=0)  # re-pins; the env stays as the lock has it
    assert "selects g\\x1b[2J, env MODE=a\\x1b[1mb\\nFAKE=1)" in clean(r)
    out = tmp_path / "out"
    r = imgquilt("apply", "--profile", "p", "--output-image", f"oci:{out}:p", cwd=q, env=env, check=0)
    assert SHOWN in clean(r) and "  Env: MODE=a\\x1b[1mb\\nFAKE=1" in r.out
    assert not any(line.startswith("FAKE") for line in r.out.splitlines())
    r = imgquilt("audit", "--profile", "p", "--image", f"oci:{out}:p", cwd=q, env=env, check=0)
    assert "is set (MODE=a\\x1b[1mb\\nFAKE=1)" in clean(r)
    # the image lacks the default: the exit-5 paragraph names it escaped too
    r = imgquilt("audit", "--profile", "p", "--image", f"oci:{image}:latest", cwd=q, env=env, check=5)
    assert "env not set: MODE=a\\x1b[1mb\\nFAKE=1 (the image has no MODE)" in clean(r)
    # with the value exact in --json (the config's Env holds it as the lock says)
    doc = json.loads(imgquilt("--json", "audit", "--profile", "p", "--image", f"oci:{out}:p", cwd=q, env=env, check=0).out)
    assert doc["env"]["expected"] == {"MODE": "a\x1b[1mb\nFAKE=1"}


@pytest.mark.parametrize("value", ["a\nb", "a\x1b[2Jb", "a\rb", "a\tb", "a\u202eb"])
def test_an_env_value_with_a_control_character_is_refused_when_declared(world, image: Path, value: str) -> None:
    q, _, env = world
    before = (q / "targets.lock").read_bytes()
    r = imgquilt("lock", "--profile", "p", "--image", f"oci:{image}:latest", "--env", f"MODE={value}", cwd=q, env=env, check=2)
    assert "--env MODE:" in clean(r) and "control character" in r.err
    assert (q / "targets.lock").read_bytes() == before
    doc = json.loads(imgquilt("--json", "lock", "--profile", "p", "--image", f"oci:{image}:latest", "--env",
                              f"MODE={value}", cwd=q, env=env, check=2).out)
    assert doc["error"]["kind"] == "usage-error"


# --- an image's reference (from the lock) in progress lines and errors --------------------------------
def test_an_image_reference_with_escapes_is_shown_escaped_in_progress_lines(world, image: Path, tmp_path: Path) -> None:
    q, _, env = world
    odd = tmp_path / "img\x1b[2J"
    os.symlink(image, odd)  # a layout whose directory name holds an escape, named by a hand-edited lock
    text = (q / "targets.lock").read_text()
    (q / "targets.lock").write_text(text.replace(json.dumps(f"rootfs:{q.parent / 'root'}"),
                                                 json.dumps(f"oci:{odd}:latest")))
    r = imgquilt("--progress=plain", "audit", "--expect", "pending", cwd=q, env=env)
    text = clean(r)
    assert "imgquilt: reading " in text and "img\\x1b[2J" in text, text


# --- the importer, fed a hostile series ----------------------------------------------------------------
DIFF = b"--- a/etc/app.conf\n+++ b/etc/app.conf\n@@ -1 +1 @@\n-workers = 2\n+workers = 8\n"
GIT = b"diff --git a/etc/app.conf b/etc/app.conf\n"
MAIL = b"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\nFrom: E <e@example.org>\n"
HOSTILE = {  # name: (the patch file, the exit codes `import FILE` and `import --series` may give)
    "topgit-trailer": (DIFF + b"-- \ntg: (3f0a1b2..) t/\x1b[2Jevil\x1b]0;x\x07 (depends on: master)\n", (0, 0)),
    "topgit-header": (b"From: \x1b[31mEvil <e@x>\nSubject: [PATCH] t/\x1b[2Jfix\n\nTopGit-patch \x1b[2J\n\n---\n" + DIFF
                      + b"-- \ntg: (3f0a1b2..) t/x\n", (0, 0)),
    "cover-letter": (MAIL + b"Subject: [PATCH 0/2] \x1b[2Jcover \x1b]0;t\x07\n\n*** BLURB \x1b[31m ***\n\n-- \n2.40\n\n"
                     + MAIL + b"Subject: [PATCH 1/2] \x1b[2Jreal\n\n---\n" + GIT + DIFF
                     + MAIL + b"Subject: [PATCH 2/2] \x1b]0;x\x07two\n\n---\n" + b"--- a/etc/new\n+++ b/etc/new\n@@ -0,0 +1 @@\n+n\n",
                     (0, 0)),
    "binary-no-content": (b"diff --git a/etc/app\x1b[2J.conf b/etc/app\x1b[2J.conf\nindex 1234567..89abcde 100644\n"
                          b"Binary files a/etc/app\x1b[2J.conf and b/etc/app\x1b[2J.conf differ\n", (6, 6)),
    "binary-new-no-content": (b'diff --git "a/etc/n\\033[2Jew" "b/etc/n\\033[2Jew"\nnew file mode 100644\nindex 0000000..89abcde\n'
                              b'Binary files /dev/null and "b/etc/n\\033[2Jew" differ\n', (6, 0)),
    "index-escape": (GIT + b"index 1234567..\x1b[2Jabcdef 100644\n" + DIFF, (0, 0)),
    "index-endless": (GIT + b"index " + b"a" * 5000 + b".." + b"b" * 5000 + b" 100644\n" + DIFF, (0, 0)),
    "index-other-blob": (GIT + b"index 1234567..89abcde 100644\n" + DIFF, (3, 0)),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_the_importer_fed_a_hostile_series_shows_escapes_and_writes_only_the_queue(tmp_path: Path, cli_env, case: str) -> None:
    from support.hostile import canary_dir, unchanged

    data, codes = HOSTILE[case]
    root = small_root(tmp_path / "root")
    home = canary_dir(tmp_path)
    up = tmp_path / "upstream"
    up.mkdir()
    (up / "fix.patch").write_bytes(data)
    (up / "series").write_bytes(b"fix.patch\n")
    for way, code in zip((["fix.patch"], ["--series", "series"]), codes):
        q = empty_queue(tmp_path / f"queue-{way[0].strip('-')}")
        with unchanged(root, home, up):
            r = imgquilt("import", "--image", f"rootfs:{root}", *[str(up / w) if not w.startswith("-") else w for w in way],
                         cwd=q, env=cli_env)
        clean(r)
        assert r.code == code, (way, r.out, r.err)
        if code == 0:  # what was written stays in the queue, names from subjects made of safe characters
            names = (q / "series").read_text().split()
            assert names and all(n.isprintable() and "\x1b" not in n for n in names), names
            assert all((q / "patches" / n).stat().st_size < 4096 for n in names)  # no endless index line kept
        else:
            assert (q / "series").read_bytes() == b"" and not (q / "patches").exists()
