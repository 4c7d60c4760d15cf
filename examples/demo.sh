#!/usr/bin/env bash
# The imgquilt demo: apply the top-level queue (series, patches/, targets.lock) to the demo image
# examples/demo-image, write the result as a layer and as a new image, then patch a copy of the
# demo filesystem in place and audit it.
#
#   bash examples/demo.sh [IMGQUILT] [OUT]      (make demo runs it with the virtualenv's imgquilt)
set -euo pipefail

IMGQUILT=${1:-imgquilt}
OUT=${2:-out}
PYTHON=${PYTHON:-python3}
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
# imgquilt's shared cache and its key (~/.cache/imgquilt, ~/.local/state/imgquilt) go below $OUT too:
# the demo writes nothing in your home directory (README), and `make clean` takes all of it
out_dir=$(cd "$OUT" && pwd)
export IMGQUILT_CACHE_DIR="$out_dir/cache" IMGQUILT_STATE_DIR="$out_dir/state"

if [ -t 1 ]; then bold=$'\033[1m' plain=$'\033[0m'; else bold='' plain=''; fi  # no escape codes into a pipe or a log
step() { printf '\n%s$ %s%s\n' "$bold" "$*" "$plain"; }

step imgquilt check
"$IMGQUILT" check

step imgquilt apply --image oci:examples/demo-image:latest --layer "$OUT/demo-fix.tar.gz" --output-image "oci:$OUT/demo-image:patched"
"$IMGQUILT" apply --image oci:examples/demo-image:latest \
    --layer "$OUT/demo-fix.tar.gz" --output-image "oci:$OUT/demo-image:patched"

rm -rf "$OUT/rootfs"
"$PYTHON" examples/build_demo.py --rootfs "$OUT/rootfs" >/dev/null
step imgquilt apply --root "$OUT/rootfs"
"$IMGQUILT" apply --root "$OUT/rootfs"

step imgquilt audit --root "$OUT/rootfs"
"$IMGQUILT" audit --root "$OUT/rootfs"

if [ "${IMGQUILT#*/}" != "$IMGQUILT" ]; then  # a path, as `make demo` passes .venv/bin/imgquilt
  where="$IMGQUILT (run it by that path, or put imgquilt on PATH as docs/install.md shows)"
else
  where=$(command -v "$IMGQUILT")
fi
cat <<DONE

Written:
  layer     $OUT/demo-fix.tar.gz           (tar -tzvf $OUT/demo-fix.tar.gz)
  image     oci:$OUT/demo-image:patched    (skopeo inspect oci:$OUT/demo-image:patched)
  rootfs    $OUT/rootfs                    (patched in place)

The imgquilt command: $where
DONE
