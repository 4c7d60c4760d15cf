"""Images name their base (issue 34, point 10): every output manifest carries the OCI image-spec's
pre-defined annotations org.opencontainers.image.base.name / .base.digest; `audit` shows them;
a docker-archive output is tagged (the name given, else the base's), so a real `podman load` (in a
private store) names what it loads; skopeo and umoci still read the outputs."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from support.imagetools import run as tool
from support.qtools import copy_demo_queue, imgquilt
from support.registry_server import registry  # noqa: F401 (fixture)

needs = lambda name: pytest.mark.skipif(shutil.which(name) is None, reason=f"{name} not installed")  # noqa: E731
BASE_NAME, BASE_DIGEST = "org.opencontainers.image.base.name", "org.opencontainers.image.base.digest"


@pytest.fixture
def demo(tmp_path: Path, cli_env):
    q = copy_demo_queue(tmp_path / "q")
    lock = (q / "targets.lock").read_text()
    pinned = lock.split('digest = "', 1)[1].split('"', 1)[0]
    return q, cli_env, pinned


def _repo_tags(archive: Path) -> list[str]:
    import tarfile

    with tarfile.open(archive) as t:
        return json.load(t.extractfile("manifest.json"))[0]["RepoTags"]  # type: ignore[arg-type]


def _manifest(layout: Path, tag: str) -> dict:
    return json.loads(tool("skopeo", "inspect", "--raw", f"oci:{layout}:{tag}"))


@needs("skopeo")
@needs("umoci")
def test_every_output_names_its_base_and_audit_shows_it(demo, tmp_path: Path) -> None:
    q, env, pinned = demo
    out = tmp_path / "out"
    imgquilt("apply", "--output-image", f"oci:{out}:fixed", cwd=q, env=env, check=0)
    notes = _manifest(out, "fixed")["annotations"]
    assert notes == {BASE_DIGEST: pinned, BASE_NAME: "oci:examples/demo-image:latest"}  # the pin, as targets.lock names it
    # audit shows it, text and JSON; the base itself names none
    r = imgquilt("audit", "--image", f"oci:{out}:fixed", cwd=q, env=env, check=0)
    assert f"Base (the image's annotations): oci:examples/demo-image:latest ({pinned})." in r.out
    doc = json.loads(imgquilt("--json", "audit", "--image", f"oci:{out}:fixed", cwd=q, env=env, check=0).out)
    assert doc["image"]["base"] == {"name": "oci:examples/demo-image:latest", "digest": pinned}
    from jsonschema import Draft202012Validator

    from support.qtools import REPO

    Draft202012Validator(json.loads((REPO / "docs/schemas/audit.schema.json").read_text())).validate(doc)
    doc = json.loads(imgquilt("--json", "audit", "--expect", "pending", cwd=q, env=env, check=0).out)
    assert doc["image"]["base"] is None
    # the small function the rebase lineage check reads them with
    from imgquilt.image.base_image import base_of
    from imgquilt.sources import open_image

    assert base_of(open_image(f"oci:{out}:fixed")).digest == pinned
    assert base_of(open_image(f"oci:{q}/examples/demo-image:latest")) is None
    # umoci still unpacks it
    tool("umoci", "unpack", "--rootless", "--image", f"{out}:fixed", tmp_path / "bundle")
    assert (tmp_path / "bundle" / "rootfs" / "var/lib/imgquilt/applied.json").is_file()


def test_base_of_ignores_what_is_no_base() -> None:
    from imgquilt.image.base_image import base_of

    class M:
        def __init__(self, doc) -> None:
            self.manifest_bytes = json.dumps(doc).encode()

    assert base_of(M({"annotations": {BASE_NAME: "reg.example.com/app:1", BASE_DIGEST: "sha256:" + "a" * 64}})).json() == \
        {"name": "reg.example.com/app:1", "digest": "sha256:" + "a" * 64}
    assert base_of(M({"annotations": {BASE_DIGEST: "not a digest", BASE_NAME: 3}})) is None
    assert base_of(M({"annotations": "x"})) is None and base_of(M([1])) is None and base_of(object()) is None


def test_a_hostile_base_name_is_one_escaped_line(demo, tmp_path: Path) -> None:
    """A manifest is anyone's to write: a base.name with a newline and an escape prints as one line."""
    import hashlib
    import shutil

    q, env, _ = demo
    out = tmp_path / "out"
    imgquilt("apply", "--output-image", f"oci:{out}:fixed", cwd=q, env=env, check=0)
    index = json.loads((out / "index.json").read_text())
    old = index["manifests"][0]["digest"].split(":")[1]
    doc = json.loads((out / "blobs/sha256" / old).read_bytes())
    doc["annotations"][BASE_NAME] = "x\nThe record agrees with the bytes.\x1b[2J"
    data = json.dumps(doc).encode()
    new = hashlib.sha256(data).hexdigest()
    (out / "blobs/sha256" / new).write_bytes(data)
    index["manifests"][0].update(digest=f"sha256:{new}", size=len(data))
    (out / "index.json").write_text(json.dumps(index))
    r = imgquilt("audit", "--image", f"oci:{out}:fixed", cwd=q, env=env, check=0)
    line = next(ln for ln in r.out.splitlines() if ln.startswith("Base "))
    assert line.startswith("Base (the image's annotations): x\\nThe record agrees with the bytes.\\x1b[2J (")
    assert "\x1b" not in r.out
    shutil.rmtree(out)


def test_archive_tag_is_the_bases_own_name() -> None:
    from imgquilt.image.base_image import archive_tag

    class Img:
        def __init__(self, ref, transport, names=()) -> None:
            self.ref, self.transport, self.names = ref, transport, names

    assert archive_tag(Img("docker://reg.example.com:5000/team/app:1.0", "docker", ("docker://reg.example.com:5000/team/app:1.0",))) \
        == "reg.example.com:5000/team/app:1.0"
    assert archive_tag(Img("docker://reg.example.com/app@sha256:" + "a" * 64, "docker")) is None  # a digest names no tag
    assert archive_tag(Img("oci:/srv/vLLM_rocm:0.10.1", "oci")) == "localhost/vllm-rocm:0.10.1"
    assert archive_tag(Img("oci:/srv/img", "oci", ("2.0",))) == "localhost/img:2.0"
    assert archive_tag(Img("oci-archive:/srv/base.tar", "oci-archive")) == "localhost/base:latest"
    assert archive_tag(Img("docker-archive:/srv/b.tar", "docker-archive", ("app",))) == "app:latest"


@needs("skopeo")
@needs("podman")
def test_docker_archive_outputs_are_named_so_podman_load_names_them(demo, tmp_path: Path, own_store) -> None:
    q, env, pinned = demo
    env = {**env, **own_store}
    for ref, want in ((f"docker-archive:{tmp_path}/named.tar:team/demo:1.0-fixed", "localhost/team/demo:1.0-fixed"),
                      (f"docker-archive:{tmp_path}/plain.tar", "localhost/demo-image:latest")):
        imgquilt("apply", "--output-image", ref, cwd=q, env=env, check=0)
        path = ref.split(":", 2)[1]
        # the archive names it (manifest.json's RepoTags), and skopeo still reads it
        assert _repo_tags(Path(path)) == [want.removeprefix("localhost/") if "team/" in want else want]
        assert json.loads(tool("skopeo", "inspect", f"docker-archive:{path}"))["Labels"]["org.imgquilt.series.sha256"]
        loaded = subprocess.run(["podman", "load", "-i", path], capture_output=True, text=True, env=env)
        assert loaded.returncode == 0, loaded.stderr
        assert f"Loaded image: {want}" in loaded.stdout, loaded.stdout
        seen = json.loads(subprocess.run(["podman", "image", "inspect", want], capture_output=True, text=True, env=env,
                                         check=True).stdout)[0]
        assert seen["Labels"]["org.imgquilt.series.sha256"]
    names = subprocess.run(["podman", "images", "--format", "{{.Repository}}:{{.Tag}}"], capture_output=True, text=True,
                           env=env, check=True).stdout.split()
    assert sorted(names) == ["localhost/demo-image:latest", "localhost/team/demo:1.0-fixed"]


@needs("skopeo")
def test_a_registry_base_is_named_as_the_spec_asks(registry, demo, tmp_path: Path) -> None:  # noqa: F811
    q, env, _ = demo
    base = registry.ref("demo:latest")
    host = base.removeprefix("docker://").split("/", 1)[0]
    out = tmp_path / "out"
    imgquilt("apply", "--image", base, "--output-image", f"oci:{out}:fixed", cwd=q, env=env, check=0)
    digest = json.loads(tool("skopeo", "inspect", "--tls-verify=false", base))["Digest"]
    # fully qualified, no transport: what `docker pull` takes
    assert _manifest(out, "fixed")["annotations"] == {BASE_NAME: f"{host}/demo:latest", BASE_DIGEST: digest}
    imgquilt("apply", "--image", base, "--output-image", f"docker-archive:{tmp_path}/d.tar", cwd=q, env=env, check=0)
    assert _repo_tags(tmp_path / "d.tar") == [f"{host}/demo:latest"]
    tool("skopeo", "inspect", f"docker-archive:{tmp_path}/d.tar")
