#!/usr/bin/env bash
# The OpenWrt package of a target's one-folder build: dist/cross/TARGET/edge-runtime_<version>_<arch>.ipk,
# in opkg's format (a gzip'd tar of debian-binary, control.tar.gz and data.tar.gz, as OpenWrt's
# opkg-build writes it). It installs:
#   /usr/lib/edge-runtime/         the one-folder build (nothing is unpacked at start)
#   /usr/bin/edge-runtime          a symlink to it
#   /etc/init.d/edge-runtime       the procd init script (build/openwrt/edge-runtime.init)
#   /etc/config/edge-runtime       the UCI defaults (build/openwrt/edge-runtime.config; a conffile)
# Install on the router: opkg install ./edge-runtime_….ipk (docs/building.md: router builds).
# Usage: openwrt-package.sh TARGET
source "$(dirname "$0")/env.sh"
TARGET="${1:-${TARGET:-}}"
source "$CROSS_DIR/targets.sh"
OUT="$REPO_ROOT/dist/cross/$TARGET"
NAME="$(readlink "$OUT/edge-runtime")"
VERSION="$(sed -n 's/^__version__ = "\(.*\)"/\1/p' "$REPO_ROOT/edge_runtime/__init__.py")"
IPK="$OUT/edge-runtime_${VERSION}_${OPENWRT_ARCH}.ipk"
STAGE="$TARGET_DIR/ipk"
rm -rf "$STAGE" && mkdir -p "$STAGE/data/usr/lib" "$STAGE/data/usr/bin" "$STAGE/data/etc/init.d" \
    "$STAGE/data/etc/config" "$STAGE/control"

tar -xJf "$OUT/$NAME.tar.xz" -C "$STAGE/data/usr/lib"
mv "$STAGE/data/usr/lib/$NAME" "$STAGE/data/usr/lib/edge-runtime"
ln -s ../lib/edge-runtime/edge-runtime "$STAGE/data/usr/bin/edge-runtime"
install -m 0755 "$REPO_ROOT/build/openwrt/edge-runtime.init" "$STAGE/data/etc/init.d/edge-runtime"
install -m 0600 "$REPO_ROOT/build/openwrt/edge-runtime.config" "$STAGE/data/etc/config/edge-runtime"

size=$(du -sk "$STAGE/data" | cut -f1)
cat > "$STAGE/control/control" <<CONTROL
Package: edge-runtime
Version: $VERSION
Depends: libc
Source: edge-runtime
License: Proprietary
Section: utils
Architecture: $OPENWRT_ARCH
Installed-Size: $((size * 1024))
Maintainer: QingLong Edge Runtime
Description: QingLong edge runtime: scheduled commands with durable, fenced cancellation on one
 SQLite file. Built for musl $MUSL_VERSION ($LOADER), $ZIG_TARGET.
CONTROL
echo /etc/config/edge-runtime > "$STAGE/control/conffiles"
# opkg runs these with IPKG_INSTROOT set when installing into an image: touch nothing then.
cat > "$STAGE/control/postinst" <<'POSTINST'
#!/bin/sh
[ -n "$IPKG_INSTROOT" ] && exit 0
/etc/init.d/edge-runtime enable
/etc/init.d/edge-runtime start
exit 0
POSTINST
cat > "$STAGE/control/prerm" <<'PRERM'
#!/bin/sh
[ -n "$IPKG_INSTROOT" ] && exit 0
/etc/init.d/edge-runtime stop
/etc/init.d/edge-runtime disable
exit 0
PRERM
chmod 0755 "$STAGE/control/postinst" "$STAGE/control/prerm"
echo "2.0" > "$STAGE/debian-binary"

tar_opts=(--owner=0 --group=0 --numeric-owner --sort=name --mtime=@0 --format=gnu)
tar "${tar_opts[@]}" -czf "$STAGE/data.tar.gz" -C "$STAGE/data" .
tar "${tar_opts[@]}" -czf "$STAGE/control.tar.gz" -C "$STAGE/control" .
rm -f "$OUT"/edge-runtime_*.ipk
tar "${tar_opts[@]}" -czf "$IPK" -C "$STAGE" ./debian-binary ./control.tar.gz ./data.tar.gz
log "OpenWrt package: $IPK ($(stat -c %s "$IPK") bytes)"
