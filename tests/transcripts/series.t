# Reading the demo queue: nothing is applied in a fresh copy.
$ imgquilt series
0001-which-skip-empty-path-elements.patch
0002-demo-tool-honour-no-color.patch
0003-app-config-longer-timeouts.patch
0004-demosvc-healthcheck.patch
0005-config-shared-expert-knob.patch
0006-moe-shared-expert.patch

$ imgquilt series -v
  0001-which-skip-empty-path-elements.patch
  0002-demo-tool-honour-no-color.patch
  0003-app-config-longer-timeouts.patch
  0004-demosvc-healthcheck.patch
  0005-config-shared-expert-knob.patch
  0006-moe-shared-expert.patch

$ imgquilt top
imgquilt: No patches applied.
[exit 2]

$ imgquilt top --json
{
  "top": null
}

$ imgquilt unapplied
0001-which-skip-empty-path-elements.patch
0002-demo-tool-honour-no-color.patch
0003-app-config-longer-timeouts.patch
0004-demosvc-healthcheck.patch
0005-config-shared-expert-knob.patch
0006-moe-shared-expert.patch

$ imgquilt applied

# a queue is found from a subdirectory, as quilt finds .pc
$ mkdir -p sub/dir && cd sub/dir && imgquilt series | head -2
0001-which-skip-empty-path-elements.patch
0002-demo-tool-honour-no-color.patch

$ imgquilt header 0003-app-config-longer-timeouts.patch
Description: app config: longer request and keep-alive timeouts
 Long generations take more than 30 s; the load balancer keeps idle
 connections for 60 s, so keep-alive must outlive it.
Author: Serving Team <serving@example.org>
Forwarded: not-needed
Status: deployed

$ imgquilt check
The queue is sound: 6 patch(es), chains and Requires in order.

$ imgquilt check --json
{
  "ok": true,
  "problems": [],
  "patches": [
    "0001-which-skip-empty-path-elements.patch",
    "0002-demo-tool-honour-no-color.patch",
    "0003-app-config-longer-timeouts.patch",
    "0004-demosvc-healthcheck.patch",
    "0005-config-shared-expert-knob.patch",
    "0006-moe-shared-expert.patch"
  ]
}
