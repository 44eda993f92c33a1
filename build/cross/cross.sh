#!/usr/bin/env bash
# `make cross TARGET=…`: the router artifacts of one target, from the package registries alone.
#   1. fetch.sh         every input, checked against build/cross/inputs.lock
#   2. build-python.sh  musl root, zlib, libffi, CPython 3.11 (shared libpython) with zig
#   3. build-app.sh     apsw + SQLite, msgspec, PyInstaller and its bootloader for the target
#   4. package.py       PyInstaller under qemu-user, publish to dist/cross/TARGET/, audit
#   5. openwrt-package.sh  the OpenWrt packages of the one-folder build: .ipk (opkg) and .apk (apk 3)
# Finished steps are kept in $CROSS_CACHE/TARGET (delete it, or set EDGE_CROSS_CACHE to an empty
# directory, to build from scratch). Usage: cross.sh TARGET PYTHON (the project venv's python)
source "$(dirname "$0")/env.sh"
TARGET="$1"; HOST_PY="$2"
source "$CROSS_DIR/targets.sh"
started=$(date +%s)
"$CROSS_DIR/install-deps.sh"
"$CROSS_DIR/fetch.sh" "$TARGET"
"$CROSS_DIR/build-python.sh" "$TARGET"
"$CROSS_DIR/build-app.sh" "$TARGET"
"$CROSS_DIR/binfmt.sh" "$TARGET"
source "$CROSS_DIR/toolchain.sh"
export TARGET_DIR PREFIX SYSROOT TC_BIN OPENWRT_ARCH ZIG_TARGET CPU LOADER MUSL_VERSION QEMU
"$HOST_PY" "$CROSS_DIR/package.py" "$TARGET"
"$CROSS_DIR/openwrt-package.sh" "$TARGET"
log "make cross TARGET=$TARGET done in $(( $(date +%s) - started )) s"
