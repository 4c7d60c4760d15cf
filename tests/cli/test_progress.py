"""Progress of image reads (issue 29, point 4): on a terminal (tmux, a real one) one line per layer being
read, the layers read at once together, totals from the manifest, redrawn steadily, never wider than the
terminal; off a terminal (a pipe, a CI log) plain lines for reads that take a while (every one with
--progress=plain), nothing with --quiet or --progress=never; --json draws no bars.

The registry serves the image through a proxy that trickles the blobs, so a read takes seconds."""
from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import time
import uuid

import pytest

from support.imagetools import build_oci, file
from support.qtools import TOOL, write_patch
from support.registry_server import fault_proxy, registry, seed  # noqa: F401 (fixtures)

from imgquilt.cli.progress import Board, mode

SVC = b"def port():\n    return 8000\n"
CHUNK, PAUSE = 128 << 10, 0.12  # the proxy's trickle: ~1 MB/s


@pytest.fixture(scope="module")
def image(registry, tmp_path_factory):
    layout = tmp_path_factory.mktemp("progress") / "img"
    # the target in the bottom layer: the reader goes down through the middle one, the bottom one read
    # ahead meanwhile (two layers read at once)
    build_oci(layout, [[file("srv/app/svc.py", SVC.decode()), file("usr/share/a.bin", os.urandom(2 << 20))],
                       [file("usr/share/b.bin", os.urandom(2 << 20))], [file("etc/motd", "hi\n")]], tag="v1")
    seed(registry, f"oci:{layout}:v1", "progress:v1")
    return "progress:v1"


@pytest.fixture
def slow(fault_proxy, image):
    """The image behind a proxy that sends each blob in 128 kB pieces, 0.12 s apart."""

    def fault(method: str, path: str):
        if method != "GET" or "/blobs/sha256:" not in path:
            return None
        upstream = fault_proxy.upstream

        def trickle(handler) -> None:
            import urllib.request

            data = urllib.request.urlopen(f"http://{upstream.host}{path}").read()
            handler.send_response(200)
            handler.send_header("Content-Length", str(len(data)))
            handler.send_header("Content-Type", "application/octet-stream")
            handler.end_headers()
            for at in range(0, len(data), CHUNK):
                handler.wfile.write(data[at:at + CHUNK])
                handler.wfile.flush()
                time.sleep(PAUSE)
        return ("raw", trickle)

    fault_proxy.fault = fault
    return fault_proxy.ref(image)


@pytest.fixture
def queue(tmp_path):
    q = tmp_path / "q"
    q.mkdir()
    write_patch(q, "0001-port.patch", [("srv/app/svc.py", SVC, SVC.replace(b"8000", b"9000"))])
    return q


@pytest.fixture
def env(cli_env, tmp_path):
    cli_env["PYTHONPATH"] = str(TOOL)
    cli_env["TERM"] = "xterm-256color"
    cli_env["IMGQUILT_CACHE_DIR"] = str(tmp_path / "cache")
    cli_env["IMGQUILT_TLS_VERIFY"] = "false"
    cli_env.pop("IMGQUILT_PROGRESS", None)
    return cli_env


def piped(args: list[str], cwd, env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "imgquilt", *args], cwd=cwd, env=env, capture_output=True, text=True)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux (Debian package, .ci/install-tools)")
def test_a_terminal_shows_every_layer_being_read_with_its_total_on_lines_that_never_wrap(slow, queue, env, tmp_path) -> None:
    """tmux: a real terminal 72 columns wide, its screen captured five times a second while audit reads."""
    session = f"iq{uuid.uuid4().hex[:8]}"
    done = tmp_path / "done"
    cmd = " ".join([sys.executable, "-m", "imgquilt", "audit", "--image", slow, "--expect", "pending", ";", "touch", str(done), ";", "sleep", "60"])
    tmux_env = [a for k in ("PYTHONPATH", "IMGQUILT_CACHE_DIR", "IMGQUILT_TLS_VERIFY", "IMGQUILT_STATE_DIR", "HOME") if k in env
                for a in ("-e", f"{k}={env[k]}")]
    client_env = {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES")}  # as in a shell: the terminal says
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "72", "-y", "30", "-c", str(queue), *tmux_env, cmd], check=True,
                   env={**client_env, "TMUX": ""})
    frames: list[list[str]] = []
    still = 0  # captures taken while the screen held still (the wrap check needs two views of one screen)
    try:
        deadline = time.monotonic() + 90
        while not done.exists() and time.monotonic() < deadline:
            shown = subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout
            joined = subprocess.run(["tmux", "capture-pane", "-p", "-J", "-t", session], capture_output=True, text=True).stdout
            again = subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout
            if shown == again and re.search(r"layer \d/3 sha256:", shown):
                assert shown == joined, f"a line wrapped:\n{shown}"  # -J joins wrapped lines: none may be
                still += 1
            frames.append(shown.splitlines())
            time.sleep(0.2)
        final = subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    assert done.exists(), "audit did not finish"
    assert still >= 1, "no capture of the bars on a screen that held still"
    bars = [[ln for ln in f if re.search(r"layer \d/3 sha256:", ln)] for f in frames]
    assert any(len(b) >= 2 for b in bars), "two layers read at once are shown at once"
    assert all(len(ln) <= 71 for b in bars for ln in b)
    totals = [re.search(r" ([\d.]+) (kB|MB)/([\d.]+) MB ", ln) for b in bars for ln in b]
    assert any(t and t.group(3) == "2.1" for t in totals), "the total is the layer's size from the manifest"
    # steady: the count of one layer grows frame by frame, not in one jump at the end
    seen = sorted({float(t.group(1)) * (1000 if t.group(2) == "MB" else 1) for t in totals if t and t.group(3) == "2.1"})
    assert len(seen) >= 5, seen
    assert "0001-port.patch" in final and not re.search(r"layer \d/3 sha256:", final)  # the bars went before the report


def test_off_a_terminal_a_long_read_says_so_in_plain_lines_and_a_quick_one_says_nothing(slow, image, registry, queue, env) -> None:
    r = piped(["audit", "--image", slow, "--expect", "pending"], queue, env)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "layer" in ln]
    assert any(re.fullmatch(r"imgquilt: reading layer 1/3 sha256:[0-9a-f]{12} of [\d.]+ kB|imgquilt: reading layer [23]/3 sha256:[0-9a-f]{12} of 2\.1 MB", ln)
               for ln in lines), lines
    assert any(re.fullmatch(r"imgquilt: read layer [23]/3 sha256:[0-9a-f]{12}: 2\.1 MB in [\d.]+ s", ln) for ln in lines), lines
    assert "\x1b[" not in r.stderr and "━" not in r.stderr
    # the same image read fast (no proxy, a fresh cache): under a second, no line at all
    fast = piped(["audit", "--image", registry.ref(image), "--expect", "pending"], queue, {**env, "IMGQUILT_CACHE_DIR": env["IMGQUILT_CACHE_DIR"] + "2"})
    assert fast.returncode == 0 and "layer" not in fast.stderr, fast.stderr
    # --progress=plain: every layer, however quick; --quiet and --progress=never: nothing
    plain = piped(["--progress=plain", "audit", "--image", registry.ref(image), "--expect", "pending"], queue,
                  {**env, "IMGQUILT_CACHE_DIR": env["IMGQUILT_CACHE_DIR"] + "3"})
    assert plain.returncode == 0
    assert len([ln for ln in plain.stderr.splitlines() if ln.startswith("imgquilt: read layer ")]) >= 1
    for quiet in (["--quiet"], ["--progress", "never"]):
        r = piped([*quiet, "audit", "--image", slow, "--expect", "pending"], queue,
                  {**env, "IMGQUILT_CACHE_DIR": env["IMGQUILT_CACHE_DIR"] + quiet[-1]})
        assert r.returncode == 0 and "layer" not in r.stderr, r.stderr
    r = piped(["--progress=sometimes", "audit", "--image", slow], queue, env)
    assert r.returncode == 2 and "never, auto or plain" in r.stderr


def test_the_lines_of_a_long_read_come_every_five_seconds_and_fit_any_width() -> None:
    now = [0.0]
    out = io.StringIO()
    b = Board("delayed", out=out, clock=lambda: now[0], width=lambda: 80)
    t = b.start("sha256:aa", "layer 1/1 sha256:aaaaaaaaaaaa", 10 << 20)
    b.tick()
    assert out.getvalue() == ""  # not yet a second
    for second in range(1, 13):
        now[0] = float(second)
        b.advance(t, 1 << 20)
        b.tick()
    b.finish(t)
    lines = out.getvalue().splitlines()
    assert lines[0] == "imgquilt: reading layer 1/1 sha256:aaaaaaaaaaaa of 10.5 MB"
    assert [ln.split(": ", 2)[2] for ln in lines[1:-1]] == ["6.3 MB of 10.5 MB (60%), 6 s", "11.5 MB of 10.5 MB (110%), 11 s"]
    assert lines[-1] == "imgquilt: read layer 1/1 sha256:aaaaaaaaaaaa: 12.6 MB in 12.0 s"
    # on a terminal: whatever the width (80 when it is not known), a line stays inside it
    bars = Board("bars", out=io.StringIO(), clock=lambda: now[0])
    long = bars.start("k", "a very long label " * 8, 5 << 30)
    bars.advance(long, 1 << 30)
    for width in (20, 30, 45, 72, 80, 200):
        assert len(bars.render(long, width)) <= width - 1, width
    assert " 1.1 GB/5.4 GB " in bars.render(long, 80)


def test_mode_follows_the_option_the_environment_and_the_terminal(monkeypatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("IMGQUILT_PROGRESS", raising=False)
    assert mode(None, False, Tty()) == "bars" and mode(None, True, Tty()) == "none"
    assert mode(None, False, io.StringIO()) == "delayed" and mode("plain", False, Tty()) == "lines"
    assert mode("never", False, Tty()) == "none"
    monkeypatch.setenv("IMGQUILT_PROGRESS", "plain")
    assert mode(None, False, io.StringIO()) == "lines" and mode("auto", False, io.StringIO()) == "delayed"


def test_progress_of_a_local_image_loads_no_registry_client(queue, env, tmp_path) -> None:
    """Progress is on (plain lines, off a terminal), and its download hook set, for every read; a local
    audit still loads no registry client (httpx costs 0.1 s of start-up in every warm run)."""
    layout = tmp_path / "img"
    build_oci(layout, [[file("srv/app/svc.py", SVC.decode())]], tag="v1")
    probe = ("import sys\nfrom imgquilt.cli.main import main\n"
             f"sys.argv = ['imgquilt', '--progress', 'plain', 'audit', '--image', 'oci:{layout}:v1', '--expect', 'pending']\n"
             "code = 0\ntry:\n    main()\nexcept SystemExit as e:\n    code = e.code or 0\n"
             "print('exit', code, 'httpx' in sys.modules, 'imgquilt.image.sources.registry' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", probe], cwd=queue, env=env, capture_output=True, text=True)
    assert r.stdout.strip().splitlines()[-1] == "exit 0 False False", (r.stdout, r.stderr)


SITE = "usr/local/lib/python3.11/site-packages"


def _modules_image(tmp_path):
    """A local image whose patched module imports one from a lower layer: the modules' bytes are not
    kept by the first read (`add` reads only the target), so the Python check reads that layer again."""
    layout = tmp_path / "img"
    build_oci(layout, [[file(f"{SITE}/lib/__init__.py", "def call(a):\n    pass\n"), file(f"{SITE}/lib/big.bin", os.urandom(1 << 20))],
                       [file(f"{SITE}/app.py", "X = 1\n")]], tag="v1")
    return f"oci:{layout}:v1"


def test_the_python_check_reading_modules_from_an_image_shows_the_layer_it_reads(env, tmp_path) -> None:
    """Issue 37, point 7: `add`, then `refresh` of a file that gains an import, then `lock` and `rebase`:
    the layer read again for the imported module is shown, off a terminal (plain lines) and on one (a
    pty: `script`), never a silent wait."""
    from support.qtools import imgquilt

    ref = _modules_image(tmp_path)
    q = tmp_path / "work"
    q.mkdir()
    plain = {**env, "IMGQUILT_PROGRESS": "plain"}
    imgquilt("init", cwd=q, env=plain, check=0)
    imgquilt("new", "0001-call.patch", cwd=q, env=plain, check=0)
    added = imgquilt("add", "--image", ref, f"{SITE}/app.py", cwd=q, env=plain, check=0)
    assert re.search(r"imgquilt: read .*layer [12]/2 sha256:[0-9a-f]{12}", added.err), added.err
    (q / ".imgquilt/work" / SITE / "app.py").write_text("X = 1\nfrom lib import call\ncall(1)\n")
    layer = r"imgquilt: reading .*layer 2/2 sha256:[0-9a-f]{12}"  # the bottom layer, where lib/ is
    r = imgquilt("refresh", cwd=q, env=plain, check=0)
    assert re.search(layer, r.err), r.err
    shutil.rmtree(env["IMGQUILT_CACHE_DIR"] + "/files", ignore_errors=True)  # the module's bytes: read again
    locked = imgquilt("lock", "--image", ref, cwd=q, env=plain, check=0)
    assert re.search(layer, locked.err), locked.err
    imgquilt("pop", "-a", cwd=q, env=plain, check=0)
    shutil.rmtree(env["IMGQUILT_CACHE_DIR"] + "/files", ignore_errors=True)
    rebased = imgquilt("rebase", "--image", ref, cwd=q, env=plain)
    assert rebased.code == 0 and re.search(layer, rebased.err), rebased.err
    # on a terminal: the bar of that layer is drawn (then taken away before the report)
    imgquilt("push", "-a", cwd=q, env=plain, check=0)
    (q / ".imgquilt/work" / SITE / "app.py").write_text("X = 1\nfrom lib import call\ncall(2)\n")
    shutil.rmtree(env["IMGQUILT_CACHE_DIR"] + "/files", ignore_errors=True)
    tty_env = {k: v for k, v in env.items() if k not in ("IMGQUILT_PROGRESS",)}
    tty_env["PYTHONPATH"] = str(TOOL)
    cmd = f"{sys.executable} -m imgquilt refresh"
    shown = subprocess.run(["script", "-q", "-e", "-c", cmd, "/dev/null"], cwd=q, env=tty_env, capture_output=True, text=True,
                           stdin=subprocess.DEVNULL, timeout=120)
    assert shown.returncode == 0, shown.stdout
    assert re.search(r"\x1b\[2K.*layer 2/2 sha256.*/1\.0 MB", shown.stdout), repr(shown.stdout[-2000:])  # its bar
    assert "Refreshed patch 0001-call.patch." in shown.stdout
