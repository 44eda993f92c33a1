# Shared settings of the cross build (sourced by the other scripts in build/cross/).
# Caches live outside the repository; CI passes without them (they only save downloads and time).
set -euo pipefail
CROSS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$CROSS_DIR/../.." && pwd)"
CROSS_CACHE="${EDGE_CROSS_CACHE:-${XDG_CACHE_HOME:-/var/cache}/edge-runtime-cross}"
DL="$CROSS_CACHE/dl"
# zig writes hundreds of MB of objects: keep them in the cache, never in ~/.cache.
export ZIG_GLOBAL_CACHE_DIR="$CROSS_CACHE/zig-cache"
export ZIG_LOCAL_CACHE_DIR="$CROSS_CACHE/zig-cache"
TOOLS="$CROSS_CACHE/tools"
ZIG="$TOOLS/zig/ziglang/zig"
# The host's Python of the exact version the target's CPython is built from (a cross build of
# CPython needs a build Python of the same version): Debian 12's own /usr/bin/python3.11.
BUILD_PYTHON="${EDGE_CROSS_BUILD_PYTHON:-/usr/bin/python3.11}"
JOBS="${EDGE_CROSS_JOBS:-$(nproc)}"

lock_field() { # lock_field NAME FIELD(2=version 3=sha256 4=file)
    awk -v n="$1" -v f="$2" '$1 == n { print $f; found = 1 } END { exit !found }' "$CROSS_DIR/inputs.lock"
}

used_field() { # used_field NAME FIELD: as lock_field, from what fetch.sh actually used for this target
    # ($TARGET_DIR/inputs.used: a newer Debian revision may stand in for a pin that Debian dropped)
    awk -v n="$1" -v f="$2" '$1 == n { print $f; found = 1 } END { exit !found }' "$TARGET_DIR/inputs.used"
}

log() { printf '== [%s] %s\n' "$(date +%H:%M:%S)" "$*"; }

# A finished step of a target is recorded with the hash of the recipe (these scripts and the lock)
# and of the inputs fetch.sh used for it, so a changed recipe, or a Debian revision standing in for
# a pin, rebuilds instead of reusing what older ones made.
RECIPE_HASH="$(cat "$CROSS_DIR"/env.sh "$CROSS_DIR"/targets.sh "$CROSS_DIR"/toolchain.sh "$CROSS_DIR"/build-musl.sh \
    "$CROSS_DIR"/build-python.sh "$CROSS_DIR"/build-app.sh "$CROSS_DIR"/inputs.lock | sha256sum | cut -c1-16)"
stage_hash() { { echo "$RECIPE_HASH"; cat "$TARGET_DIR/inputs.used"; } | sha256sum | cut -c1-16; }
stage_done() { [ "$(cat "$TARGET_DIR/.done-$1" 2>/dev/null)" = "$(stage_hash)" ]; }
mark_done() { stage_hash > "$TARGET_DIR/.done-$1"; }
