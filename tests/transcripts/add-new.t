# Issue 18, point 5: `add` of a path the image does not have is refused unless --new says the patch creates it.
$ imgquilt new 0007-probe.patch > /dev/null && imgquilt add usr/local/lib/python3.11/site-packages/demosvc/confg.py
imgquilt: usr/local/lib/python3.11/site-packages/demosvc/confg.py: not in the image, and no applied patch creates it; nothing was added.
Check the path (the one inside the image, as the patches name it); to create a new file there, `imgquilt add --new usr/local/lib/python3.11/site-packages/demosvc/confg.py`.
[exit 6]

$ imgquilt edit usr/local/bin/probe
imgquilt: usr/local/bin/probe: not in the image, and no applied patch creates it; nothing was added.
Check the path (the one inside the image, as the patches name it); to create a new file there, `imgquilt add --new usr/local/bin/probe`.
[exit 6]

$ imgquilt add --new usr/local/bin/probe && printf '#!/bin/sh\necho ok\n' > .imgquilt/work/usr/local/bin/probe && chmod +x .imgquilt/work/usr/local/bin/probe && imgquilt refresh && head -3 patches/0007-probe.patch | tail -1
File usr/local/bin/probe added to patch 0007-probe.patch ($TMP/queue/.imgquilt/work/usr/local/bin/probe).
Refreshed patch 0007-probe.patch.
Updated targets.lock (no image read).
Index: usr/local/bin/probe
