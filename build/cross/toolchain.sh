# The target's C toolchain: zig (from PyPI's ziglang wheel) as cc/ar/ranlib, through small wrappers
# in $TARGET_DIR/bin (sourced after env.sh and targets.sh).
TC_BIN="$TARGET_DIR/bin"

install_zig() {
    [ -x "$ZIG" ] && return 0
    log "unpack ziglang $(lock_field ziglang 2)"
    rm -rf "$TOOLS/zig" && mkdir -p "$TOOLS/zig"
    "$BUILD_PYTHON" -m zipfile -e "$DL/$(lock_field ziglang 4)" "$TOOLS/zig"
    chmod +x "$ZIG"
}

write_wrappers() {
    mkdir -p "$TC_BIN"
    # cc: `zig cc` for the target CPU. lld spells the soname option -soname (CPython's Makefile
    # uses the Solaris-style -Wl,-hNAME). zig names CPUs cortex_a7, but its preprocessor-only mode
    # hands -mcpu to clang, which wants cortex-a7. zig turns __DATE__ into an error (reproducible
    # builds); CPython's build info uses it.
    # A Python extension module (a shared object not named lib*.so) exports only PyInit_*: zig
    # links its compiler-rt into every shared object, and with every symbol exported
    # --gc-sections could drop none of it (300 KB per module on soft-float MIPS).
    echo '{ global: PyInit_*; local: *; };' > "$TC_BIN/extension.map"
    cat > "$TC_BIN/cc" <<CC
#!/bin/sh
cpu=$CPU
shared=; out=
for a in "\$@"; do
    [ "\$out" = next ] && out="\$a"
    case "\$a" in -shared) shared=1 ;; -o) out=next ;; -o*) out="\${a#-o}" ;; esac
done
case "\$shared:\${out##*/}" in
    1:lib*) ;;
    1:*.so) set -- "\$@" -Wl,--gc-sections "-Wl,--version-script=$TC_BIN/extension.map" ;;
esac
for a in "\$@"; do
    shift
    case "\$a" in
        -Wl,-h,*) set -- "\$@" "-Wl,-soname,\${a#-Wl,-h,}" ;;
        -Wl,-h*) set -- "\$@" "-Wl,-soname,\${a#-Wl,-h}" ;;
        -E|-M|-MM) cpu=\$(echo "\$cpu" | tr _ -); set -- "\$@" "\$a" ;;
        *) set -- "\$@" "\$a" ;;
    esac
done
exec "$ZIG" cc -target $ZIG_TARGET -mcpu=\$cpu -Wno-date-time "\$@"
CC
    printf '#!/bin/sh\nexec "%s" ar "$@"\n' "$ZIG" > "$TC_BIN/ar"
    printf '#!/bin/sh\nexec "%s" ranlib "$@"\n' "$ZIG" > "$TC_BIN/ranlib"
    # Host LLVM binutils handle ELF files of every architecture (PyInstaller and waf look for
    # strip/objcopy/objdump on PATH or next to cc).
    for tool in strip objcopy objdump readelf; do
        printf '#!/bin/sh\nexec llvm-%s "$@"\n' "$tool" > "$TC_BIN/$tool"
    done
    # ldd for PyInstaller running under qemu: with no argument musl's ldd names musl (PyInstaller's
    # musl check); with files it is the musl loader's --list.
    cat > "$TC_BIN/ldd" <<LDD
#!/bin/sh
if [ \$# -eq 0 ]; then echo "musl libc ($DEB_ARCH)" >&2; echo "Version $MUSL_VERSION" >&2; exit 1; fi
exec $QEMU -L "$SYSROOT" "$SYSROOT/lib/$LOADER" --list "\$@"
LDD
    # Running a target program: qemu-user with the musl root as the loader's prefix.
    cat > "$TC_BIN/run" <<RUN
#!/bin/sh
exec $QEMU -L "$SYSROOT" "\$@"
RUN
    chmod +x "$TC_BIN"/*
}

install_zig
write_wrappers
# Host LLVM tools read and edit ELF files of any architecture.
export CC="$TC_BIN/cc" AR="$TC_BIN/ar" RANLIB="$TC_BIN/ranlib" READELF=llvm-readelf
