# Issue 18, point 7: no output writes a layer that changes nothing.
$ imgquilt apply --output-image oci:$SANDBOX/patched:v1 | tail -1
Wrote image: oci:$SANDBOX/patched:v1 sha256:65f77e7b982b06797b58071c4df9ab6fea27c700674db86102288f26c1c8ae7d

# onto the image that already holds the series' result: the base as it is (same digest), no layer, no overlay
$ imgquilt apply --image oci:$SANDBOX/patched:v1 --output-image oci:$SANDBOX/again:v1 --layer $SANDBOX/again.tar --overlay $SANDBOX/again-overlay
note: Every target is already at the series' result: nothing to change.
Verified 6 patch(es) on oci:$SANDBOX/patched:v1 (pinned by targets.lock).
Nothing to change: oci:$SANDBOX/patched:v1 already holds the series' result; no layer written ($SANDBOX/again.tar).
Nothing to change: oci:$SANDBOX/patched:v1 already holds the series' result; no overlay written ($SANDBOX/again-overlay).
Wrote image: oci:$SANDBOX/again:v1 sha256:65f77e7b982b06797b58071c4df9ab6fea27c700674db86102288f26c1c8ae7d (the base as it is: it already holds the series' result, so no layer was added)

$ ls $SANDBOX && skopeo inspect --format '{{len .Layers}} layers' oci:$SANDBOX/patched:v1 && skopeo inspect --format '{{len .Layers}} layers' oci:$SANDBOX/again:v1
again
patched
4 layers
4 layers

$ imgquilt --json apply --image oci:$SANDBOX/patched:v1 --output-image oci:$SANDBOX/again:v2 | python3 -c 'import json, sys; d = json.load(sys.stdin); print(d["changes"], d["outputs"]["image"]["unchanged"], d["outputs"]["image"]["layer_digest"])'
False True None

# point 10: a no-op in place says so
$ python3 examples/build_demo.py --rootfs $SANDBOX/root > /dev/null && imgquilt apply --root $SANDBOX/root | tail -1 && imgquilt apply --root $SANDBOX/root | tail -1
Wrote root: $SANDBOX/root (9 file(s) replaced)
note: Every target is already at the series' result: nothing to change.
Nothing to change in root $SANDBOX/root: it already holds the series' result.
