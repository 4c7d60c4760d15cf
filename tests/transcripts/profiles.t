# Profiles (docs/profiles.md): one queue, two deployments of the demo image. `slow` takes the
# longer timeouts (0003) and sets a kill switch; `edge` leaves the healthcheck (0004) out.
# No profile is declared yet: a guard no profile selects is refused (a typo would drop the fix
# from every deployment) until --new-guard says it is meant.
$ imgquilt guard 0003-app-config-longer-timeouts.patch +slow
imgquilt: No profile selects guard 'slow': targets.lock declares no profile. With it the patch would be in no deployment.
Correct the name, or declare a profile that selects it (`imgquilt lock --profile NAME --image REF --select slow`), or keep it anyway with `imgquilt guard --new-guard ...`. Nothing was changed.
[exit 2]

$ imgquilt guard --new-guard 0003-app-config-longer-timeouts.patch +slow
0003-app-config-longer-timeouts.patch: +slow
Updated targets.lock (no image read).

$ imgquilt guard --new-guard 0004-demosvc-healthcheck.patch -edge
0004-demosvc-healthcheck.patch: -edge
Updated targets.lock (no image read).

$ imgquilt guard --list
0001-which-skip-empty-path-elements.patch: unguarded
0002-demo-tool-honour-no-color.patch: unguarded
0003-app-config-longer-timeouts.patch: +slow
0004-demosvc-healthcheck.patch: -edge
0005-config-shared-expert-knob.patch: unguarded
0006-moe-shared-expert.patch: unguarded

# quilt reads the guards as comments; every other byte of series stays
$ cat series
0001-which-skip-empty-path-elements.patch
0002-demo-tool-honour-no-color.patch
0003-app-config-longer-timeouts.patch #+slow
0004-demosvc-healthcheck.patch #-edge
0005-config-shared-expert-knob.patch
0006-moe-shared-expert.patch

# the default selects no guard: 0003 (+slow) left it, and `guard` re-pinned the default in the same
# step; until a profile selects slow, no deployment applies 0003, and check says so
$ imgquilt check
imgquilt: The queue has 1 problem(s):
  - 0003-app-config-longer-timeouts.patch (+slow): no pin selects it (pins: the default), so no deployment applies it.
A guard no profile selects is usually a typo (`imgquilt guard PATCH +NAME` to correct it); declare a profile that selects it (`imgquilt lock --profile NAME --image REF --select GUARD`), or accept it with `imgquilt check --allow-unselected`.
[exit 3]

$ imgquilt check --allow-unselected
The queue is sound: 6 patch(es), chains and Requires in order.

$ imgquilt lock | tail -1
Wrote $TMP/queue/targets.lock.

$ imgquilt lock --profile slow --image oci:examples/demo-image:latest --env DEMO_TIMEOUT_S=120
Profile slow (selects slow, env DEMO_TIMEOUT_S=120): pinned 8 target(s) of 6 patch(es) to oci:examples/demo-image:latest (sha256:6bb1322e12565ffb0282c7a19388ae882ec84b3450af838ace17f722de1daab8).
Wrote $TMP/queue/targets.lock.

$ imgquilt lock --profile edge --image oci:examples/demo-image:latest
Profile edge (selects edge): pinned 5 target(s) of 4 patch(es) to oci:examples/demo-image:latest (sha256:6bb1322e12565ffb0282c7a19388ae882ec84b3450af838ace17f722de1daab8).
Wrote $TMP/queue/targets.lock.

$ imgquilt check
The queue is sound: 6 patch(es), chains and Requires in order.

# typos: a guard or a new profile one or two keys away from a declared one is refused, naming it
$ imgquilt guard 0005-config-shared-expert-knob.patch -egde
imgquilt: No profile selects guard 'egde' (edge selects edge; slow selects slow). It would keep the patch out of no deployment. Did you mean 'edge'?
Correct the name, or declare a profile that selects it (`imgquilt lock --profile NAME --image REF --select egde`), or keep it anyway with `imgquilt guard --new-guard ...`. Nothing was changed.
[exit 2]

$ imgquilt lock --profile sloww --image oci:examples/demo-image:latest
imgquilt: Profile 'sloww' is not declared; targets.lock declares edge, slow. Did you mean 'slow'?
Re-pin it with --profile slow, or declare 'sloww' as a new profile with `imgquilt lock --new --profile ...`. Nothing was read or written.
[exit 2]

$ imgquilt apply --profile edeg --layer $SANDBOX/x.tar.gz
imgquilt: Unknown profile 'edeg': targets.lock declares edge, slow. Did you mean 'edge'?
Use --profile edge; a new profile is declared with `imgquilt lock --profile NAME --image REF`.
[exit 2]

$ imgquilt guard --list | grep 0005
0005-config-shared-expert-knob.patch: unguarded

$ ls $SANDBOX

# every profile at once: each output path needs {profile}, checked before anything is read
$ imgquilt apply --profile all --output-image oci:$SANDBOX/out:fixed
imgquilt: --output-image oci:$SANDBOX/out:fixed would be written once per profile (2 profiles): it needs the {profile} placeholder, or each profile would overwrite the one before.
Example: --output-image oci:out:{profile}. Nothing was read or written.
[exit 2]

$ imgquilt apply --profile all --output-image oci:$SANDBOX/out:{profile} | grep -v '^ok '
Profile edge:
Verified 4 patch(es) on oci:examples/demo-image:latest (pinned by targets.lock).
Wrote image: oci:$SANDBOX/out:edge sha256:1d8ec12e5f48ccb39c1942ff089904303f232c8f644f89b053191fdd1c52b0ae
Profile slow:
Verified 6 patch(es) on oci:examples/demo-image:latest (pinned by targets.lock).
Wrote image: oci:$SANDBOX/out:slow sha256:f7a673c5314b3bca2e15f94a420a92e03dbe4454070bb4cd49c527f336cc1a88
  Env: DEMO_TIMEOUT_S=120

$ imgquilt audit --profile all --image oci:$SANDBOX/out:edge | grep -i 'profile\|match'
Audit of oci:$SANDBOX/out:edge as profile edge
Profile edge: matches.
Audit of oci:$SANDBOX/out:edge as profile slow
Profile slow: does not match.
oci:$SANDBOX/out:edge matches profile(s): edge.

# the work tree follows a profile
$ imgquilt select slow
The work tree follows profile slow (selects slow): 6 of 6 patch(es).

$ imgquilt push -a | grep '^Now'
Now at patch 0006-moe-shared-expert.patch

$ imgquilt select edge
imgquilt: 6 patch(es) are applied (0001-which-skip-empty-path-elements.patch, 0002-demo-tool-honour-no-color.patch, 0003-app-config-longer-timeouts.patch, 0004-demosvc-healthcheck.patch, 0005-config-shared-expert-knob.patch, 0006-moe-shared-expert.patch); their bases are profile slow's.
`imgquilt pop -a` first (refresh what you want to keep), or `imgquilt select NAME --pop`.
[exit 2]

$ imgquilt select edge --pop | tail -2
  guarded out: 0003-app-config-longer-timeouts.patch
  guarded out: 0004-demosvc-healthcheck.patch

$ imgquilt apply --profile nope
imgquilt: Unknown profile 'nope': targets.lock declares edge, slow.
Declare it with `imgquilt lock --profile nope --image REF [--select GUARD,...] [--env KEY=VALUE]`.
[exit 2]
