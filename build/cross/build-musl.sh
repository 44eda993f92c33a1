#!/usr/bin/env bash
# musl (Debian 12's source) built with the same zig toolchain as everything else of the target,
# installed into the musl root. For mipsel-musl-sf: Debian's mipsel musl is hard-float (gcc), and
# soft-float code from zig calling it got garbage back from modf/round/sqrt. One toolchain, one
# float ABI. Usage: build-musl.sh TARGET (called by build-python.sh)
source "$(dirname "$0")/env.sh"
TARGET="${1:-${TARGET:-}}"
source "$CROSS_DIR/targets.sh"
source "$CROSS_DIR/toolchain.sh"
SRC="$TARGET_DIR/src"
log "musl $(lock_field musl 2) for $TARGET with zig"
rm -rf "$SRC/musl" && mkdir -p "$SRC/musl"
tar -xzf "$DL/$(lock_field musl 4)" -C "$SRC/musl" --strip-components=1
# musl links itself with -nostdlib, so zig's compiler-rt (the soft-float arithmetic __adddf3 & co.)
# must be named: the one zig links into every program for this target.
echo 'int f(double a, double b) { return a < b; }' > "$SRC/musl/probe.c"
compiler_rt="$("$CC" -shared -fPIC -o "$SRC/musl/probe.so" "$SRC/musl/probe.c" -v 2>&1 | grep -o '[^ ]*libcompiler_rt\.a' | head -1)"
[ -f "$compiler_rt" ] || { echo "Error: cannot find zig's compiler-rt for $ZIG_TARGET" >&2; exit 1; }
(cd "$SRC/musl" && ./configure --prefix=/usr --syslibdir=/lib --target="$HOST_TRIPLE" \
    LIBCC="$compiler_rt" >"$TARGET_DIR/musl-configure.log" 2>&1 \
    && make -j"$JOBS" LIBCC="$compiler_rt" >"$TARGET_DIR/musl-make.log" 2>&1 \
    && make install DESTDIR="$SYSROOT" LIBCC="$compiler_rt" >"$TARGET_DIR/musl-install.log" 2>&1) \
    || { tail -20 "$TARGET_DIR"/musl-*.log; exit 1; }
# musl links the loader to /usr/lib/libc.so by an absolute path, which outside the chroot (qemu's
# QEMU_LD_PREFIX) would point into the host: make it relative.
[ -L "$SYSROOT/lib/$LOADER" ] && ln -sfn ../usr/lib/libc.so "$SYSROOT/lib/$LOADER"
[ -e "$SYSROOT/lib/$LOADER" ] || { echo "Error: musl installed no /lib/$LOADER (soft-float not detected?)" >&2; ls "$SYSROOT/lib" >&2; exit 1; }
log "musl: $SYSROOT/lib/$LOADER"
