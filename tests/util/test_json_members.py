"""One rule for "the member KEY of the JSON object in untrusted bytes, else None" (util.jsonin.member_or_none),
used by the registry client, the registry's error answers, the OCI layout marker, the base-image annotations
and the base config's `created` (image/ wrote it five times; two of them let a deeply nested document
escape as a RecursionError, an internal error)."""

from __future__ import annotations

import httpx
import pytest

from imgquilt.errors import BadImage
from imgquilt.image.base_image import BaseImage, base_of
from imgquilt.image.registry.client import _declared_media_type
from imgquilt.image.registry.problems import registry_messages
from imgquilt.image.sinks.mutate import created_of
from imgquilt.image.sources.oci_layout import check_layout_marker
from imgquilt.util.jsonin import member_or_none

DEEP = b"[" * 200000  # deeper than CPython's parser recurses


@pytest.mark.parametrize("data", [b"", b"not json", b"\xff\xfe", b"[1, 2]", b'"text"', b"{}", DEEP, b"{" * 5])
def test_member_or_none_is_none_for_anything_but_an_object_with_the_member(data):
    assert member_or_none(data, "k") is None


def test_member_or_none_gives_the_member_as_written():
    assert member_or_none(b'{"k": [1, {"a": null}], "j": 2}', "k") == [1, {"a": None}]
    assert member_or_none('{"k": "v"}', "k") == "v"


class _Image:
    def __init__(self, manifest: bytes) -> None:
        self.manifest_bytes = manifest


def test_base_image_annotations_of_a_hostile_manifest_are_no_base():
    assert base_of(_Image(DEEP)) is None  # was a RecursionError (exit 1)
    assert base_of(_Image(b"[]")) is None
    digest = "sha256:" + "a" * 64
    doc = b'{"annotations": {"org.opencontainers.image.base.name": "r/x:1", "org.opencontainers.image.base.digest": "%s"}}'
    assert base_of(_Image(doc % digest.encode())) == BaseImage("r/x:1", digest)


def test_created_of_a_hostile_config_is_none():
    assert created_of(DEEP) is None  # was a RecursionError (exit 1)
    assert created_of(b'{"created": 5}') is None
    assert created_of(b'{"created": "2024-01-02T03:04:05.123456789Z"}') == "2024-01-02T03:04:05.123456789Z"


def test_layout_marker_and_registry_answers():
    for bad in (b"[]", b"nope", DEEP, b'{"imageLayoutVersion": 1}'):
        with pytest.raises(BadImage, match="has an unreadable oci-layout file"):
            check_layout_marker(bad, "dir x")
    check_layout_marker(b'{"imageLayoutVersion": "1.0.0"}', "dir x")
    assert (
        _declared_media_type(b'{"mediaType": "application/vnd.oci.image.index.v1+json"}')
        == "application/vnd.oci.image.index.v1+json"
    )
    assert _declared_media_type(DEEP) is None and _declared_media_type(b'{"mediaType": 1}') is None
    answer = httpx.Response(400, content=b'{"errors": [{"code": "DENIED", "message": "no"}, 5]}')
    assert registry_messages(answer) == "DENIED: no"
    assert registry_messages(httpx.Response(400, content=DEEP)) == ""
    assert registry_messages(httpx.Response(400, content=b"")) == ""
