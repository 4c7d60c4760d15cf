# Issue 18, point 9: a closed stdout pipe is not an error: the command ends with its own exit code.
$ python3 examples/build_demo.py --rootfs $SANDBOX/root > /dev/null && imgquilt apply --root $SANDBOX/root > /dev/null

$ bash -c 'set -o pipefail; imgquilt audit --root $SANDBOX/root | head -c0; echo "exit $?"'
exit 0

$ bash -c 'set -o pipefail; imgquilt --json audit --root $SANDBOX/root | head -c0; echo "exit $?"'
exit 0

$ bash -c 'set -o pipefail; imgquilt series -v | head -c0; echo "exit $?"'
exit 0

# a failure keeps its code: audit of the base image, where no patch is live yet
$ bash -c 'set -o pipefail; imgquilt audit | head -c0; echo "exit $?"'
imgquilt: 6 of 6 patch(es) are not live: 0001-which-skip-empty-path-elements.patch (pending), 0002-demo-tool-honour-no-color.patch (pending), 0003-app-config-longer-timeouts.patch (pending), 0004-demosvc-healthcheck.patch (pending), 0005-config-shared-expert-knob.patch (pending), 0006-moe-shared-expert.patch (pending).
Apply the queue (`imgquilt apply`), or carry it onto this image (`imgquilt rebase`).
exit 5
