# Per-target facts (sourced after env.sh with TARGET set).
case "${TARGET:-}" in
aarch64-musl)
    ZIG_TARGET=aarch64-linux-musl; QEMU=qemu-aarch64-static; DEB_ARCH=arm64
    LOADER=ld-musl-aarch64.so.1; HOST_TRIPLE=aarch64-linux-musl; OPENWRT_ARCH=aarch64_cortex-a53
    CPU=cortex_a53; MUSL_FROM=debian ;;
mipsel-musl-sf)
    ZIG_TARGET=mipsel-linux-musleabi; QEMU=qemu-mipsel-static; DEB_ARCH=mipsel
    LOADER=ld-musl-mipsel-sf.so.1; HOST_TRIPLE=mipsel-linux-musl; OPENWRT_ARCH=mipsel_24kc
    CPU=mips32r2; MUSL_FROM=zig ;;
mipsel-musl-hf)
    ZIG_TARGET=mipsel-linux-musleabihf; QEMU=qemu-mipsel-static; DEB_ARCH=mipsel
    LOADER=ld-musl-mipsel.so.1; HOST_TRIPLE=mipsel-linux-musl; OPENWRT_ARCH=mipsel_24kc_hf
    CPU=mips32r2; MUSL_FROM=debian ;;
armv7-musl)
    ZIG_TARGET=arm-linux-musleabihf; QEMU=qemu-arm-static; DEB_ARCH=armhf
    LOADER=ld-musl-armhf.so.1; HOST_TRIPLE=arm-linux-musleabihf; OPENWRT_ARCH=arm_cortex-a7_neon-vfpv4
    CPU=cortex_a7; MUSL_FROM=debian ;;
*)
    echo "Error: TARGET must be one of: aarch64-musl mipsel-musl-sf mipsel-musl-hf armv7-musl (got '${TARGET:-}')" >&2
    exit 2 ;;
esac
TARGET_DIR="$CROSS_CACHE/$TARGET"
SYSROOT="$TARGET_DIR/root"          # the musl root: loader, busybox, and /opt/python inside it
PREFIX="$SYSROOT/opt/python"        # the cross CPython (same absolute path on host and under qemu)
DEPS="$TARGET_DIR/deps"             # zlib, libffi built for the target
MUSL_VERSION=1.2.3                  # Debian 12's musl, the C library every target is built against
