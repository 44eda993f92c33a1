#!/usr/bin/env bash
# Into the target's CPython (built by build-python.sh): apsw (with SQLite from the amalgamation)
# and msgspec compiled by zig, PyInstaller with a bootloader compiled by zig for the target.
# Usage: build-app.sh TARGET
source "$(dirname "$0")/env.sh"
TARGET="${1:-${TARGET:-}}"
source "$CROSS_DIR/targets.sh"
source "$CROSS_DIR/toolchain.sh"
SRC="$TARGET_DIR/src"
SITE="$PREFIX/lib/python3.11/site-packages"
PY_INC="$PREFIX/include/python3.11"
EXT_SUFFIX="$(sed -n "s/^ *'EXT_SUFFIX': '\(.*\)',$/\1/p" "$PREFIX"/lib/python3.11/_sysconfigdata_*.py)"
# zig links musl statically unless a shared library is among the inputs; the bootloader must be
# dynamically linked to dlopen libpython. An empty library (dropped again by --as-needed) does it.
DYN_STUB="$TARGET_DIR/link/dynamic-stub.so"
EXT_CFLAGS=(-shared -fPIC -O2 -DNDEBUG -ffunction-sections -fdata-sections -Wl,--gc-sections -s -I"$PY_INC")


if ! stage_done apsw; then
    log "apsw $(lock_field apsw 2) with SQLite from better-sqlite3 $(lock_field better-sqlite3 2)"
    rm -rf "$SRC/apsw" && mkdir -p "$SRC/apsw/sqlite3"
    tar -xzf "$DL/$(lock_field apsw 4)" -C "$SRC/apsw" --strip-components=1
    tar -xzf "$DL/$(lock_field better-sqlite3 4)" -C "$SRC/apsw/sqlite3" --strip-components=3 \
        package/deps/sqlite3/sqlite3.c package/deps/sqlite3/sqlite3.h package/deps/sqlite3/sqlite3ext.h
    rm -rf "$SITE/apsw" && mkdir -p "$SITE/apsw"
    cp "$SRC/apsw/apsw"/*.py "$SITE/apsw/"
    # The options the runtime relies on (STRICT tables, json_valid in CHECK, DQS off at open are
    # in every build of this SQLite); the rest as apsw's own builds set them. -Os (after
    # EXT_CFLAGS' -O2, so it wins): SQLite is most of the router artifact's bytes after libpython;
    # optimised for size it is 420 KB smaller (90 KB in the tar.xz, measured on mipsel), room the
    # router tarballs keep within their budget (build/budget.toml). A device's Run is bound by its
    # flash's syncs, not by SQLite's CPU (docs/benchmarks.md: the router figures).
    "$CC" "${EXT_CFLAGS[@]}" -Os -I"$SRC/apsw/sqlite3" -DAPSW_USE_SQLITE_AMALGAMATION \
        -DSQLITE_ENABLE_COLUMN_METADATA -DSQLITE_ENABLE_MATH_FUNCTIONS -DSQLITE_DEFAULT_FOREIGN_KEYS=0 \
        -o "$SITE/apsw/__init__$EXT_SUFFIX" "$SRC/apsw/src/apsw.c"
    mark_done apsw
fi

if ! stage_done msgspec; then
    log "msgspec $(lock_field msgspec 2)"
    rm -rf "$SRC/msgspec" && mkdir -p "$SRC/msgspec"
    tar -xzf "$DL/$(lock_field msgspec 4)" -C "$SRC/msgspec" --strip-components=1
    rm -rf "$SITE/msgspec" && mkdir -p "$SITE/msgspec"
    cp "$SRC/msgspec/msgspec"/*.py "$SITE/msgspec/"
    "$CC" "${EXT_CFLAGS[@]}" -o "$SITE/msgspec/_core$EXT_SUFFIX" "$SRC/msgspec/msgspec/_core.c"
    mark_done msgspec
fi

if ! stage_done pyinstaller; then
    log "PyInstaller $(lock_field pyinstaller 2) and its bootloader for $TARGET"
    rm -rf "$SRC/pyinstaller" && mkdir -p "$SRC/pyinstaller"
    tar -xzf "$DL/$(lock_field pyinstaller 4)" -C "$SRC/pyinstaller" --strip-components=1
    # A dynamically linked PIE: a static bootloader cannot dlopen libpython, and a non-PIE one
    # sent the program's sys.stdout to fd 2 under musl.
    mkdir -p "$(dirname "$DYN_STUB")" && echo 'void edge_runtime_dynamic_stub(void) {}' > "$DYN_STUB.c"
    # Not named lib*.so, so cc exports nothing from it (toolchain.sh): the bootloader must not
    # import zig's compiler-rt helpers (__aeabi_* on ARM) from the stub.
    "$CC" -shared -fPIC -o "$DYN_STUB" "$DYN_STUB.c"
    (cd "$SRC/pyinstaller/bootloader" && CFLAGS="-fPIE" LDFLAGS="-pie -Wl,--as-needed $DYN_STUB" \
        "$BUILD_PYTHON" ./waf all --static-zlib --no-tests >"$TARGET_DIR/bootloader.log" 2>&1) \
        || { tail -30 "$TARGET_DIR/bootloader.log"; exit 1; }
    rm -rf "$SITE/PyInstaller" && cp -r "$SRC/pyinstaller/PyInstaller" "$SITE/"
    for wheel in altgraph packaging pyinstaller-hooks-contrib; do
        "$BUILD_PYTHON" -m zipfile -e "$DL/$(lock_field "$wheel" 4)" "$SITE"
    done
    mark_done pyinstaller
fi
# h11, the web panel's HTTP parser (docs/panel.md): pure Python, the same wheel on every target;
# installed every time (a cache built before the panel lacks it).
rm -rf "$SITE/h11" && "$BUILD_PYTHON" -m zipfile -e "$DL/$(lock_field h11 4)" "$SITE"
# The per-Attempt monitor (docs/monitor.md): static musl, a few KiB; rebuilt every time (it is tiny).
mkdir -p "$TARGET_DIR/monitor"
"$CC" -static -Os -Wall -Wextra -s -o "$TARGET_DIR/monitor/edge-runtime-monitor" \
    "$REPO_ROOT/edge_runtime/service/native/monitor.c"
log "monitor: $(stat -c %s "$TARGET_DIR/monitor/edge-runtime-monitor") bytes"

run="$(find "$SITE/PyInstaller/bootloader" -path '*/Linux-*-musl/run' | head -1)"
headers="$( [ -n "$run" ] && llvm-readelf -l -d "$run" || true)"
if [[ "$headers" != *"interpreter: /lib/$LOADER"* || "$headers" == *stub* ]]; then
    echo "Error: no dynamically linked musl bootloader for /lib/$LOADER in $SITE/PyInstaller/bootloader" >&2
    exit 1
fi
log "apsw, msgspec and PyInstaller ($run) ready for $TARGET"
