#!/usr/bin/env bash
# `make cross-test TARGET=…`: the router artifacts of dist/cross/TARGET under qemu-user.
#   1. float sanity of the target's CPython (the artifact's libpython and musl): float_check.py
#   2. the built-binary smoke test (tests/artifact/test_built_binary.py), both forms
#   3. in the musl root (chroot: busybox, no passwd, empty environment): device-test.sh, i.e.
#      build/demo.sh, the process group, restart re-adoption, no-HOME errors
#   4. the OpenWrt package (openwrt-package.sh) installed into a copy of the musl root and its
#      procd init script's command started there
#   5. figures: sizes and start times under qemu (never pass/fail)
# Usage: cross-test.sh TARGET PYTHON (the project venv's python)
source "$(dirname "$0")/env.sh"
TARGET="$1"; HOST_PY="$2"
source "$CROSS_DIR/targets.sh"
OUT="$REPO_ROOT/dist/cross/$TARGET"
[ -e "$OUT/edge-runtime" ] || { echo "Error: no build in $OUT: run make cross TARGET=$TARGET first" >&2; exit 1; }
NAME="$(readlink "$OUT/edge-runtime")"
"$CROSS_DIR/install-deps.sh"
"$CROSS_DIR/binfmt.sh" "$TARGET"
export QEMU_LD_PREFIX="$SYSROOT"

log "1. float check ($TARGET)"
LD_LIBRARY_PATH="$PREFIX/lib" "$PREFIX/bin/python3.11" "$CROSS_DIR/float_check.py"

log "2. built-binary smoke test ($TARGET, under $QEMU)"
(cd "$REPO_ROOT" && EDGE_RUNTIME_ARTIFACT_DIR="$OUT" EDGE_RUNTIME_REQUIRE_ARTIFACT=1 \
    "$HOST_PY" -m pytest -p no:cacheprovider -q tests/artifact/test_built_binary.py)

in_root() { # in_root ROOT COMMAND...: run in a chroot with /proc and /dev, mounts private to it
    local root="$1"; shift
    mkdir -p "$root/proc" "$root/dev" "$root/tmp" "$root/var/lib"
    unshare --mount --fork -- sh -c 'mount -t proc proc "$0/proc" && mount --rbind /dev "$0/dev" && exec chroot "$0" "$@"' \
        "$root" /usr/bin/env -i PATH=/bin:/usr/bin:/sbin:/usr/sbin "$@"
}

log "3. in the musl root ($SYSROOT)"
chroot_dir="$SYSROOT/opt/edge-test"
rm -rf "$chroot_dir" && mkdir -p "$chroot_dir" "$SYSROOT/usr/bin"
"$HOST_PY" -c 'import sys, tarfile; sys.path.insert(0, sys.argv[3]); import artifact_audit as a; a.extract_safely(tarfile.open(sys.argv[1]), sys.argv[2])' \
    "$OUT/$NAME.tar.xz" "$chroot_dir" "$REPO_ROOT"
cp "$REPO_ROOT/build/demo.sh" "$CROSS_DIR/device-test.sh" "$chroot_dir/"
chroot "$SYSROOT" /bin/busybox --install -s /bin
ln -sf /bin/busybox "$SYSROOT/usr/bin/env"
in_root "$SYSROOT" /bin/sh /opt/edge-test/device-test.sh "/opt/edge-test/$NAME/edge-runtime"

if [ -x "$CROSS_DIR/openwrt-package.sh" ]; then
    log "4. OpenWrt package"
    "$CROSS_DIR/openwrt-package.sh" "$TARGET"
    pkg_root="$TARGET_DIR/pkg-root"
    rm -rf "$pkg_root" && cp -a "$SYSROOT" "$pkg_root" && rm -rf "$pkg_root/opt/edge-test" "$pkg_root/opt/python"
    cp "$CROSS_DIR/openwrt-test.sh" "$CROSS_DIR/openwrt-rc-common.sh" "$pkg_root/tmp/"
    cp "$OUT"/edge-runtime_*.ipk "$pkg_root/tmp/"
    in_root "$pkg_root" /bin/sh /tmp/openwrt-test.sh /tmp/"$(basename "$OUT"/edge-runtime_*.ipk)"
fi

log "5. figures under $QEMU (median of 5; qemu-user on this machine, not a router)"
"$HOST_PY" - "$OUT" "$NAME" "$chroot_dir/$NAME/edge-runtime" <<'PY'
import os, statistics, subprocess, sys, tempfile, time
out, name, folder_exe = sys.argv[1:]
def median_ms(argv):
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True, env={**os.environ, "TMPDIR": tempfile.gettempdir()})
        runs.append((time.perf_counter() - start) * 1000)
    return statistics.median(runs)
print(f"one-file  {name}: {os.path.getsize(os.path.join(out, name)):,} bytes; --version {median_ms([os.path.join(out, name), '--version']):.0f} ms")
print(f"one-folder {name}.tar.xz: {os.path.getsize(os.path.join(out, name + '.tar.xz')):,} bytes; --version {median_ms([folder_exe, '--version']):.0f} ms")
PY
log "cross-test $TARGET passed"
