#!/usr/bin/env bash
# `make cross-test TARGET=…`: the router artifacts of dist/cross/TARGET under qemu-user.
#   1. float sanity of the target's CPython (the artifact's libpython and musl): float_check.py
#   2. every built-binary test (tests/artifact/test_built_binary*.py; see below for the two left out)
#   3. in the musl root (chroot: busybox, no passwd, empty environment): device-test.sh, i.e.
#      build/demo.sh, the process group, restart re-adoption, no-HOME errors
#   4. OpenWrt (openwrt-package.sh), each in its own copy of the musl root with a procd stand-in:
#      the .ipk unpacked as opkg does, its service started, restarted by an upgrade, stopped; the
#      .apk added, upgraded and deleted as apk 3 does (tests/support/apk_root.py); the tarball's
#      installer script's install, upgrade and uninstall; for the last two, after each step,
#      openwrt-lifecycle.sh (the service, a Run, a restart keeping a running Run's outcome)
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

# Every built-binary test of the project, as CI runs them against the host build (.ci/run):
#   test_built_binary.py            both forms: version, help, database, C locale, serve/submit/cancel
#   test_built_binary_supervisor.py under a supervisor: the one-file launcher killed with SIGKILL (serve stops
#                                   and a new serve re-adopts; other commands and a half-started child die)
#   test_built_binary_hardening.py  hardening: a task's environment, unsafe unpack/install directories
# Left out, and why: the baked-RUNTIME_TMPDIR test rebuilds the one-file executable with the
# host's PyInstaller (sys.executable), so here it would test an x86_64 glibc build, not this
# target's; the check it reaches is the same Python entry check on sys._MEIPASS that the $TMPDIR
# tests above exercise on the target.
# The target's programs run through binfmt_misc + qemu-user. The tests scrub the environment, and
# the supervisor tests drop QEMU_LD_PREFIX too, so qemu must find the musl loader at the path the
# executable names (/lib/$LOADER), as on a router: pytest runs in a private mount namespace where a
# read-only overlay adds that one file to /usr/lib (/lib -> usr/lib); the host is left unchanged.
BUILT_BINARY_TESTS=(tests/artifact/test_built_binary.py tests/artifact/test_built_binary_supervisor.py
    tests/artifact/test_built_binary_hardening.py)
NOT_UNDER_QEMU=(--deselect
    "tests/artifact/test_built_binary_hardening.py::test_a_baked_unpack_directory_another_user_created_first_is_refused")
resolve_in_root() { # resolve_in_root PATH: PATH inside $SYSROOT with its symlinks followed there
    local path="$SYSROOT$1" target
    while [ -L "$path" ]; do
        target="$(readlink "$path")"
        case "$target" in /*) path="$SYSROOT$target" ;; *) path="$(dirname "$path")/$target" ;; esac
    done
    echo "$path"
}
loader_dir="$TARGET_DIR/loader-overlay"
rm -rf "$loader_dir" && mkdir -p "$loader_dir"
cp "$(resolve_in_root "/lib/$LOADER")" "$loader_dir/$LOADER"
log "2. built-binary tests ($TARGET, under $QEMU): ${BUILT_BINARY_TESTS[*]}"
# Without QEMU_LD_PREFIX here: qemu-user would also map the program's own absolute paths into the
# sysroot (the trusted-path walk opens "/" and then each component relative to it, so it would walk
# the sysroot instead of the real tree); the overlay gives qemu the loader, as on a router.
(cd "$REPO_ROOT" && EDGE_RUNTIME_ARTIFACT_DIR="$OUT" EDGE_RUNTIME_REQUIRE_ARTIFACT=1 \
    env -u QEMU_LD_PREFIX unshare --mount --propagation private -- sh -c 'mount -t overlay overlay -o "lowerdir=$0:/usr/lib" /usr/lib && exec "$@"' \
    "$loader_dir" "$HOST_PY" -m pytest -p no:cacheprovider -q -rs "${BUILT_BINARY_TESTS[@]}" "${NOT_UNDER_QEMU[@]}")

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

log "4. OpenWrt: the .ipk, the .apk and the installer script, each in its own copy of the musl root"
"$CROSS_DIR/openwrt-package.sh" "$TARGET"
VERSION="$(sed -n 's/^__version__ = "\(.*\)"/\1/p' "$REPO_ROOT/edge_runtime/__init__.py")"
IPK="$OUT/edge-runtime_${VERSION}_${OPENWRT_ARCH}.ipk"
APK="$OUT/edge-runtime_${VERSION}_${OPENWRT_ARCH}.apk"
fresh_root() { # fresh_root DIR: a copy of the musl root as a router has it: no Python, the procd stand-in
    rm -rf "$1" && cp -a "$SYSROOT" "$1" && rm -rf "$1/opt/edge-test" "$1/opt/python"
    mkdir -p "$1/tmp" "$1/etc" "$1/var/run"
    cp "$CROSS_DIR/openwrt-test.sh" "$CROSS_DIR/openwrt-lifecycle.sh" "$CROSS_DIR/openwrt-rc-common.sh" "$1/tmp/"
    cp "$CROSS_DIR/openwrt-rc-common.sh" "$1/etc/rc.common"
}
OPENWRT_ROOTS=("$TARGET_DIR/pkg-root" "$TARGET_DIR/apk-root" "$TARGET_DIR/installer-root")
rm -rf "${OPENWRT_ROOTS[@]}"  # a pid file left by an earlier run names nobody of ours
stop_leftover_service() { # a failed step may leave the service it started running: end it by its pid
    local root pid
    for root in "${OPENWRT_ROOTS[@]}"; do
        pid="$(cat "$root/var/run/procd-test.pid" 2>/dev/null || true)"
        if [ -n "$pid" ] && tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q "edge-runtime.* serve"; then
            kill -TERM "$pid"
        fi
    done
}
trap stop_leftover_service EXIT
in_ns() { # in_ns ROOT COMMAND...: COMMAND on the host with ROOT's /proc and /dev mounted, as apk runs beside a root
    local root="$1"; shift
    mkdir -p "$root/proc" "$root/dev"
    (cd "$REPO_ROOT" && unshare --mount --fork -- \
        sh -c 'mount -t proc proc "$0/proc" && mount --rbind /dev "$0/dev" && exec "$@"' "$root" "$@")
}

log "4a. the .ipk (OpenWrt 22.03 to 24.10), unpacked as opkg does"
pkg_root="$TARGET_DIR/pkg-root"
fresh_root "$pkg_root"
cp "$IPK" "$pkg_root/tmp/"
in_root "$pkg_root" /bin/sh /tmp/openwrt-test.sh "/tmp/$(basename "$IPK")"

log "4b. the .apk (OpenWrt 25.12 on), applied as apk 3 does (tests/support/apk_root.py): add, upgrade, del"
apk_root="$TARGET_DIR/apk-root"
fresh_root "$apk_root"
# The upgrade: the same build as a later version (apk upgrades only to another version).
upgrade_dir="$TARGET_DIR/apk-upgrade"
rm -rf "$upgrade_dir" && mkdir -p "$upgrade_dir"
ln -s "$OUT/$NAME.tar.xz" "$upgrade_dir/$NAME.tar.xz" && ln -s "$NAME" "$upgrade_dir/edge-runtime"
"$CROSS_DIR/openwrt-package.sh" "$TARGET" "$upgrade_dir" "$VERSION-r1"
apk_root_cmd=("$HOST_PY" -m tests.support.apk_root)
in_ns "$apk_root" "${apk_root_cmd[@]}" add "$apk_root" "$APK" --arch "$OPENWRT_ARCH" --base libc
in_root "$apk_root" /bin/sh /tmp/openwrt-lifecycle.sh installed apk
in_ns "$apk_root" "${apk_root_cmd[@]}" add "$apk_root" "$upgrade_dir/edge-runtime_${VERSION}-r1_${OPENWRT_ARCH}.apk" \
    --arch "$OPENWRT_ARCH" --base libc
in_root "$apk_root" /bin/sh /tmp/openwrt-lifecycle.sh upgraded apk
in_ns "$apk_root" "${apk_root_cmd[@]}" del "$apk_root" edge-runtime
in_root "$apk_root" /bin/sh /tmp/openwrt-lifecycle.sh removed apk

log "4c. the installer script of the one-folder tarball (any OpenWrt): install, upgrade, uninstall"
installer_root="$TARGET_DIR/installer-root"
fresh_root "$installer_root"
"$HOST_PY" -c 'import sys, tarfile; sys.path.insert(0, sys.argv[3]); import artifact_audit as a; a.extract_safely(tarfile.open(sys.argv[1]), sys.argv[2])' \
    "$OUT/$NAME.tar.xz" "$installer_root/tmp" "$REPO_ROOT"
in_root "$installer_root" /bin/sh -c '
    set -e
    fail() { echo "installer: FAILED: $*" >&2; exit 1; }
    if sh "/tmp/$0/install.sh" upgrade 2>/tmp/refused; then fail "upgrade of nothing succeeded"; fi
    grep -q "not installed by this script" /tmp/refused || fail "upgrade of nothing: $(cat /tmp/refused)"
    if sh "/tmp/$0/install.sh" install --prefix /tmp/edge-runtime 2>/tmp/refused; then fail "an install into RAM succeeded"; fi
    grep -q "is in RAM" /tmp/refused || fail "install into /tmp: $(cat /tmp/refused)"
    sh "/tmp/$0/install.sh" install' "$NAME"
in_root "$installer_root" /bin/sh /tmp/openwrt-lifecycle.sh installed installer
in_root "$installer_root" /bin/sh -c '
    set -e
    if sh "/tmp/$0/install.sh" install 2>/tmp/refused; then echo "installer: FAILED: a second install succeeded" >&2; exit 1; fi
    grep -q "already installed in /usr/lib/edge-runtime" /tmp/refused
    sh "/tmp/$0/install.sh" upgrade' "$NAME"
in_root "$installer_root" /bin/sh /tmp/openwrt-lifecycle.sh upgraded installer
in_root "$installer_root" /bin/sh /usr/lib/edge-runtime/install.sh uninstall
in_root "$installer_root" /bin/sh /tmp/openwrt-lifecycle.sh removed installer
trap - EXIT

log "5. figures under $QEMU (median of 5; qemu-user on this machine, not a router)"
# As in step 2: no QEMU_LD_PREFIX (the programs' own paths stay real), the loader from the overlay.
env -u QEMU_LD_PREFIX unshare --mount --propagation private -- \
    sh -c 'mount -t overlay overlay -o "lowerdir=$0:/usr/lib" /usr/lib && exec "$@"' \
    "$loader_dir" "$HOST_PY" - "$OUT" "$NAME" "$chroot_dir/$NAME/edge-runtime" <<'PY'
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
