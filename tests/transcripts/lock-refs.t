# Issue 18, point 3: a relative reference in targets.lock is the queue directory's, whatever directory made it.
$ mkdir -p $SANDBOX/images && cp -r examples/demo-image $SANDBOX/images/demo && cd $SANDBOX && imgquilt --queue ../queue lock --image oci:images/demo:latest
Pinned 8 target(s) of 6 patch(es) to oci:../sandbox/images/demo:latest (sha256:6bb1322e12565ffb0282c7a19388ae882ec84b3450af838ace17f722de1daab8).
Wrote $TMP/queue/targets.lock.

$ grep '^ref' targets.lock
ref = "oci:../sandbox/images/demo:latest"

# from patches/ and from another directory with --queue (tests/queue/test_lock_refs.py: the Python API too)
$ cd patches && imgquilt apply | tail -1
Nothing written: give --layer, --output-image, --root or --overlay.

$ cd / && imgquilt --queue $SANDBOX/../queue apply | tail -1
Nothing written: give --layer, --output-image, --root or --overlay.

# a reference from the lock that exists nowhere says that it came from the lock
$ mv $SANDBOX/images/demo $SANDBOX/images/gone && imgquilt apply
imgquilt: targets.lock pins the image 'oci:../sandbox/images/demo:latest' (its path is relative to the queue directory, $TMP/queue), but $SANDBOX/images/demo does not exist.
Pass --image REF, or pin the image where it is now with `imgquilt lock --image REF`.
[exit 6]

# the demo's own lock, made in the queue directory, reads the same from anywhere
$ mv $SANDBOX/images/gone $SANDBOX/images/demo && imgquilt lock --image oci:examples/demo-image:latest > /dev/null && grep '^ref' targets.lock && cd patches && imgquilt apply | tail -1
ref = "oci:examples/demo-image:latest"
Nothing written: give --layer, --output-image, --root or --overlay.
