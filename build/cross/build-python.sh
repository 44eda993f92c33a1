#!/usr/bin/env bash
# Build the target's CPython (shared libpython, which PyInstaller's bootloader dlopens) and the C
# libraries it needs (zlib, libffi) with zig, into $PREFIX inside the musl root.
# Usage: build-python.sh TARGET
source "$(dirname "$0")/env.sh"
TARGET="${1:-${TARGET:-}}"
source "$CROSS_DIR/targets.sh"
source "$CROSS_DIR/toolchain.sh"
SRC="$TARGET_DIR/src"
mkdir -p "$SRC" "$DEPS"


# The musl root: the target's musl (loader + libc) and a static busybox for /bin/sh.
if ! stage_done sysroot; then
    log "musl root for $TARGET"
    rm -rf "$SYSROOT" && mkdir -p "$SYSROOT"
    dpkg-deb -x "$DL/$(used_field "busybox-static:$DEB_ARCH" 4)" "$SYSROOT"
    if [ "$MUSL_FROM" = debian ]; then
        dpkg-deb -x "$DL/$(used_field "musl:$DEB_ARCH" 4)" "$SYSROOT"
    fi
    mkdir -p "$SYSROOT/bin" "$SYSROOT/tmp" "$SYSROOT/etc"
    for tool in sh ls cat sleep kill ps mkdir rm tar xz gzip sed grep env; do
        ln -sf /bin/busybox "$SYSROOT/bin/$tool"
    done
    mark_done sysroot
fi
if [ "$MUSL_FROM" = zig ] && ! stage_done musl; then
    "$CROSS_DIR/build-musl.sh" "$TARGET"
    mark_done musl
fi
[ -e "$SYSROOT/lib/$LOADER" ] || { echo "Error: no $LOADER in $SYSROOT/lib" >&2; exit 1; }

COMMON_CFLAGS="-O2 -fPIC -ffunction-sections -fdata-sections"

if ! stage_done zlib; then
    log "zlib $(lock_field zlib 2)"
    rm -rf "$SRC/zlib" && mkdir -p "$SRC/zlib"
    tar -xf "$DL/$(lock_field zlib 4)" -C "$SRC/zlib" --strip-components=1
    (cd "$SRC/zlib" && CFLAGS="$COMMON_CFLAGS" ./configure --static --prefix="$DEPS" >/dev/null \
        && make -s -j"$JOBS" libz.a && make -s install >/dev/null)
    mark_done zlib
fi

if ! stage_done libffi; then
    log "libffi $(lock_field libffi 2)"
    rm -rf "$SRC/libffi" && mkdir -p "$SRC/libffi"
    tar -xf "$DL/$(lock_field libffi 4)" -C "$SRC/libffi" --strip-components=1
    extra=()
    # The static trampolines need a separate executable mapping that musl targets do not set up.
    case "$TARGET" in aarch64-*|armv7-*) extra+=(--disable-exec-static-tramp) ;; esac
    # lld rejects the hand-written .eh_frame of libffi's MIPS o32 assembly (absolute R_MIPS_32
    # relocations in a read-only section): drop it; nothing unwinds through an ffi call frame.
    case "$TARGET" in mipsel-*) sed -i '/DWARF-2 unwind info/,$ { /^#endif/!d }' "$SRC/libffi/src/mips/o32.S" ;; esac
    export CFLAGS="$COMMON_CFLAGS"
    (cd "$SRC/libffi" && ./configure --host="$HOST_TRIPLE" --build=x86_64-linux-gnu --prefix="$DEPS" \
        --disable-shared --enable-static --with-pic --disable-docs --disable-multi-os-directory "${extra[@]}" >/dev/null \
        && make -s -j"$JOBS" >/dev/null && make -s install >/dev/null)
    unset CFLAGS
    mark_done libffi
fi

if ! stage_done python; then
    log "CPython $(lock_field python3.11 2) (this is the long step)"
    rm -rf "$SRC/python" && mkdir -p "$SRC/python"
    tar -xf "$DL/$(lock_field python3.11 4)" -C "$SRC/python" --strip-components=1
    # setup.py adds the compiler's own include directories when cross compiling; for zig those
    # hold the host's (glibc) headers too, which breaks the target's extension modules.
    sed -i 's/^\(\s*\)self.add_cross_compiling_paths()$/\1pass  # edge-runtime cross build: zig cc/' "$SRC/python/setup.py"
    cat > "$SRC/python/config.site" <<SITE
ac_cv_file__dev_ptmx=yes
ac_cv_file__dev_ptc=no
# musl's getaddrinfo is fine; configure cannot run its test program when cross compiling.
ac_cv_buggy_getaddrinfo=no
# zig's headers are newer than the device's musl 1.2.3, which has neither.
ac_cv_func_preadv2=no
ac_cv_func_pwritev2=no
SITE
    # OPT without -g: PyInstaller strips the libraries anyway, and debug info triples the build time.
    (cd "$SRC/python" && CONFIG_SITE="$SRC/python/config.site" OPT="-DNDEBUG -fwrapv" \
        CFLAGS="-O2 -ffunction-sections -fdata-sections" \
        CPPFLAGS="-I$DEPS/include" LDFLAGS="-L$DEPS/lib -Wl,--gc-sections" \
        LIBFFI_INCLUDEDIR="$DEPS/include" \
        ./configure --host="$HOST_TRIPLE" --build=x86_64-linux-gnu --prefix="$PREFIX" \
        --with-build-python="$BUILD_PYTHON" --enable-shared --without-ensurepip --disable-test-modules \
        --with-system-ffi --without-doc-strings --without-static-libpython >"$TARGET_DIR/python-configure.log" 2>&1 \
        || { tail -30 "$TARGET_DIR/python-configure.log"; exit 1; })
    # PY3LIBRARY= : no libpython3.so (the stable-ABI stub nothing here uses), which zig cannot link
    # (a shared library made of one shared library and no objects goes to the host's ld).
    (cd "$SRC/python" && make -j"$JOBS" PY3LIBRARY= >"$TARGET_DIR/python-make.log" 2>&1 \
        && make install PY3LIBRARY= >"$TARGET_DIR/python-install.log" 2>&1) \
        || { tail -40 "$TARGET_DIR/python-make.log" "$TARGET_DIR/python-install.log" 2>/dev/null; exit 1; }
    mark_done python
fi
log "CPython for $TARGET in $PREFIX"
