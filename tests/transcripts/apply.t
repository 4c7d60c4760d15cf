# apply: one line per patch and a summary; -v gives the per-file table (plain rows in a pipe).
$ imgquilt apply
ok  0001-which-skip-empty-path-elements.patch  (1 file)
ok  0002-demo-tool-honour-no-color.patch  (1 file)
ok  0003-app-config-longer-timeouts.patch  (1 file)
ok  0004-demosvc-healthcheck.patch  (2 files)
ok  0005-config-shared-expert-knob.patch  (1 file)
ok  0006-moe-shared-expert.patch  (3 files)
Verified 6 patch(es) on oci:examples/demo-image:latest (pinned by targets.lock).
Nothing written: give --layer, --output-image, --root or --overlay.

$ imgquilt apply -v
Verified
patch	file (resolved)	base	result	check
0001-which-skip-empty-path-elements.patch	bin/which (usr/bin/which)	8e7505ee9149	57ed9d92b163	ok
0002-demo-tool-honour-no-color.patch	etc/alternatives/demo-tool (usr/lib/demo-tool/tool.py)	5a29062735a6	56a851659c13	ok
0003-app-config-longer-timeouts.patch	home/app/config.toml	3cd9af323a17	71a5163fc526	ok
0004-demosvc-healthcheck.patch	usr/local/bin/demosvc-healthcheck	absent	430258461202	ok
0004-demosvc-healthcheck.patch	usr/local/lib/python3.11/site-packages/demosvc/server.py	560051daccf4	269209e912d5	ok
0005-config-shared-expert-knob.patch	usr/local/lib/python3.11/site-packages/demosvc/config.py	9137250847b6	823d890df854	ok
0006-moe-shared-expert.patch	usr/local/lib/python3.11/site-packages/demosvc/__init__.py	283b6214c227	849034123345	ok
0006-moe-shared-expert.patch	usr/local/lib/python3.11/site-packages/demosvc/config.py	823d890df854	a1d08306e888	ok
0006-moe-shared-expert.patch	usr/local/lib/python3.11/site-packages/demosvc/moe.py	611045482990	97ee7d5fc73a	ok
Verified 6 patch(es) on oci:examples/demo-image:latest (pinned by targets.lock).
Nothing written: give --layer, --output-image, --root or --overlay.

$ imgquilt apply --layer $SANDBOX/fix.tar
ok  0001-which-skip-empty-path-elements.patch  (1 file)
ok  0002-demo-tool-honour-no-color.patch  (1 file)
ok  0003-app-config-longer-timeouts.patch  (1 file)
ok  0004-demosvc-healthcheck.patch  (2 files)
ok  0005-config-shared-expert-knob.patch  (1 file)
ok  0006-moe-shared-expert.patch  (3 files)
Verified 6 patch(es) on oci:examples/demo-image:latest (pinned by targets.lock).
Wrote layer: $SANDBOX/fix.tar sha256:9d1d2420f7ac497504961149aaab4bdd1230798005dc6fcffb4d57eb6fd31326

$ tar -tf $SANDBOX/fix.tar | sort
home/
home/app/
home/app/config.toml
usr/
usr/bin/
usr/bin/which
usr/lib/
usr/lib/demo-tool/
usr/lib/demo-tool/tool.py
usr/local/
usr/local/bin/
usr/local/bin/demosvc-healthcheck
usr/local/lib/
usr/local/lib/python3.11/
usr/local/lib/python3.11/site-packages/
usr/local/lib/python3.11/site-packages/demosvc/
usr/local/lib/python3.11/site-packages/demosvc/__init__.py
usr/local/lib/python3.11/site-packages/demosvc/config.py
usr/local/lib/python3.11/site-packages/demosvc/moe.py
usr/local/lib/python3.11/site-packages/demosvc/server.py
var/
var/lib/
var/lib/imgquilt/
var/lib/imgquilt/applied.json

# the same layer on top of the demo image, as a new OCI image; audit finds every patch live in it
$ imgquilt apply --output-image oci:$SANDBOX/out:patched | tail -1
Wrote image: oci:$SANDBOX/out:patched sha256:65f77e7b982b06797b58071c4df9ab6fea27c700674db86102288f26c1c8ae7d

$ imgquilt audit --image oci:$SANDBOX/out:patched
Audit of oci:$SANDBOX/out:patched
patch	state	files	first divergent file
0001-which-skip-empty-path-elements.patch	live	1	
0002-demo-tool-honour-no-color.patch	live	1	
0003-app-config-longer-timeouts.patch	live	1	
0004-demosvc-healthcheck.patch	live	2	
0005-config-shared-expert-knob.patch	live	1	
0006-moe-shared-expert.patch	live	3	
Base (the image's annotations): oci:examples/demo-image:latest (sha256:6bb1322e12565ffb0282c7a19388ae882ec84b3450af838ace17f722de1daab8).
Apply record var/lib/imgquilt/applied.json by imgquilt 0.1.0: 6 patch(es) recorded as applied, from the image (sha256:6bb1322e12565ffb0282c7a19388ae882ec84b3450af838ace17f722de1daab8).
  The record agrees with the bytes.
6 patch(es): 6 live.

$ imgquilt apply --no-such-option
Usage: imgquilt apply [OPTIONS]
Try 'imgquilt apply -h' for help.

Error: No such option: --no-such-option
[exit 2]

$ imgquilt apply --json --layer /nonexistent/dir/fix.tar
{
  "error": {
    "code": 2,
    "kind": "usage-error",
    "message": "Cannot write the layer '/nonexistent/dir/fix.tar': directory '/nonexistent/dir' does not exist.",
    "hint": null
  }
}
imgquilt: Cannot write the layer '/nonexistent/dir/fix.tar': directory '/nonexistent/dir' does not exist.
[exit 2]
