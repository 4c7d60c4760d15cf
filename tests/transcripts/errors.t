# Failures: a clear paragraph on stderr, the documented exit code, and with --json one document on stdout.
$ imgquilt push 0042-no-such.patch
imgquilt: Patch 0042-no-such.patch is not in series.
[exit 2]

$ imgquilt --json push 0042-no-such.patch
{
  "pushed": [],
  "files": {},
  "top": null,
  "error": {
    "code": 2,
    "kind": "usage-error",
    "message": "Patch 0042-no-such.patch is not in series.",
    "hint": null
  }
}
imgquilt: Patch 0042-no-such.patch is not in series.
[exit 2]

$ imgquilt pop
imgquilt: No patch is applied.
Nothing to pop.
[exit 2]

$ imgquilt --json pop
{
  "error": {
    "code": 2,
    "kind": "usage-error",
    "message": "No patch is applied.",
    "hint": "Nothing to pop."
  }
}
imgquilt: No patch is applied.
Nothing to pop.
[exit 2]

$ imgquilt lock --image oci:no/such/layout
imgquilt: OCI layout no/such/layout does not exist or is not a directory.
[exit 6]

$ imgquilt --json check --image oci:no/such/layout
{
  "ok": false,
  "problems": [
    "OCI layout no/such/layout does not exist or is not a directory."
  ],
  "patches": [
    "0001-which-skip-empty-path-elements.patch",
    "0002-demo-tool-honour-no-color.patch",
    "0003-app-config-longer-timeouts.patch",
    "0004-demosvc-healthcheck.patch",
    "0005-config-shared-expert-knob.patch",
    "0006-moe-shared-expert.patch"
  ],
  "error": {
    "code": 6,
    "kind": "bad-image",
    "message": "OCI layout no/such/layout does not exist or is not a directory.",
    "hint": null
  }
}
imgquilt: OCI layout no/such/layout does not exist or is not a directory.
[exit 6]

$ cd $SANDBOX && imgquilt new 0001-x.patch
imgquilt: No queue found: no `series` file in $SANDBOX or above.
Create one here with `imgquilt init` (or pass --queue DIR).
[exit 2]

$ cd $SANDBOX && imgquilt init && imgquilt new 0001-x.patch && cat .gitignore series
Initialized a queue in $SANDBOX (series, patches/, .gitignore).
Next: `imgquilt new NAME.patch`, then `imgquilt add PATH --image REF`.
Patch 0001-x.patch is now on top (patches/0001-x.patch).
Next: `imgquilt add PATH` (or `edit PATH`), change the files under .imgquilt/work/, then `imgquilt refresh`.
.imgquilt/
0001-x.patch

$ imgquilt -h | head -3
Usage: imgquilt [OPTIONS] COMMAND [ARGS]...

  A quilt-style patch queue for container images.

$ imgquilt completion bash | tail -1
complete -o default -F _imgquilt_completion imgquilt
