# Issue 18, point 10: the smaller ones.
# a hunk that does not match quotes the lines as text, not Python byte reprs
$ sed -i 's/^ host = "0.0.0.0"$/ host = "127.0.0.1"/' patches/0003-app-config-longer-timeouts.patch && imgquilt refresh --rehash 0003-app-config-longer-timeouts.patch
imgquilt: Refused: 0003-app-config-longer-timeouts.patch: home/app/config.toml: the body does not apply to its pinned base (hunk #1 does not match at line 3: expected 'host = "127.0.0.1"', found 'host = "0.0.0.0"').
Fix the hunk text (its context and removed lines must match the base exactly), then run the command again.
[exit 6]

# --locked without a lock says to pin the queue, not to pin it again
$ cp patches/0003-app-config-longer-timeouts.patch $SANDBOX/ && sed -i 's/^ host = "127.0.0.1"$/ host = "0.0.0.0"/' patches/0003-app-config-longer-timeouts.patch && mv targets.lock $SANDBOX/ && imgquilt apply --locked --image oci:examples/demo-image:latest
imgquilt: --locked given, but $TMP/queue/targets.lock does not exist.
Pin the queue to its image with `imgquilt lock --image REF` and commit targets.lock.
[exit 6]

# -h lists the global --tls-verify
$ mv $SANDBOX/targets.lock . && imgquilt -h | grep -A1 -- '--tls-verify BOOL'
  --tls-verify BOOL  Registries (docker://): false reaches one over HTTP or
                     without a valid certificate, as skopeo's --tls-

# header -e that changes nothing says so
$ IMGQUILT_EDITOR=true imgquilt header -e 0001-which-skip-empty-path-elements.patch
Header of 0001-which-skip-empty-path-elements.patch unchanged.

$ IMGQUILT_EDITOR="sed -i s/^Status:.*/Status:\ merged/" imgquilt header -e 0005-config-shared-expert-knob.patch && imgquilt header 0005-config-shared-expert-knob.patch | grep Status
Header of 0005-config-shared-expert-knob.patch updated.
Updated targets.lock (no image read).
Status: merged

# bash completion offers patch names for push, pop, diff and header
$ imgquilt push 2 > /dev/null && COMP_WORDS="imgquilt push " COMP_CWORD=2 _IMGQUILT_COMPLETE=complete_bash imgquilt
0003-app-config-longer-timeouts.patch
0004-demosvc-healthcheck.patch
0005-config-shared-expert-knob.patch
0006-moe-shared-expert.patch

$ COMP_WORDS="imgquilt pop " COMP_CWORD=2 _IMGQUILT_COMPLETE=complete_bash imgquilt
0001-which-skip-empty-path-elements.patch
0002-demo-tool-honour-no-color.patch

$ COMP_WORDS="imgquilt diff -P 0002" COMP_CWORD=3 _IMGQUILT_COMPLETE=complete_bash imgquilt
0002-demo-tool-honour-no-color.patch

$ COMP_WORDS="imgquilt header 0004" COMP_CWORD=2 _IMGQUILT_COMPLETE=complete_bash imgquilt
0004-demosvc-healthcheck.patch
