#!/usr/bin/env bash
# The OpenWrt packages of a target's one-folder build, both from the same files:
#   edge-runtime_<version>_<arch>.ipk   opkg's format (OpenWrt 22.03 to 24.10): a gzip'd tar of
#                                       debian-binary, control.tar.gz and data.tar.gz, as opkg-build writes it
#   edge-runtime_<version>_<arch>.apk   apk-tools 3's format (OpenWrt 25.12 and later): ADB, written by
#                                       apkv3.py as `apk mkpkg` writes it
# Both install:
#   /usr/lib/edge-runtime/         the one-folder build (nothing is unpacked at start)
#   /usr/bin/edge-runtime          a symlink to it
#   /etc/init.d/edge-runtime       the procd init script (build/openwrt/edge-runtime.init)
#   /etc/config/edge-runtime       the UCI defaults (build/openwrt/edge-runtime.config): a conffile, kept
#                                  when changed (opkg's conffiles; apk keeps a changed file under /etc and
#                                  writes its own as edge-runtime.apk-new)
# and enable and start the service; removing the package stops and disables it. The .apk also
# carries what OpenWrt's own apk packages carry for sysupgrade (/lib/apk/packages/edge-runtime.list,
# .conffiles, .conffiles_static: a changed /etc/config/edge-runtime survives a firmware upgrade).
# The init script and the defaults are the copies inside the tarball (its openwrt/ folder, which the
# installer script beside them installs without a package manager: build/openwrt/install.sh).
# Install on the router: docs/building.md, router builds.
# Usage: openwrt-package.sh TARGET [DIR [VERSION]]
#   DIR holds the build (default dist/cross/TARGET) and receives the packages; VERSION (default the
#   project's) names a version other than the build's, for an upgrade test.
source "$(dirname "$0")/env.sh"
TARGET="${1:-${TARGET:-}}"
source "$CROSS_DIR/targets.sh"
OUT="${2:-$REPO_ROOT/dist/cross/$TARGET}"
NAME="$(readlink "$OUT/edge-runtime")"
VERSION="${3:-$(sed -n 's/^__version__ = "\(.*\)"/\1/p' "$REPO_ROOT/edge_runtime/__init__.py")}"
BASE="edge-runtime_${VERSION}_${OPENWRT_ARCH}"
STAGE="$TARGET_DIR/package"
rm -rf "$STAGE" && mkdir -p "$STAGE/data/usr/lib" "$STAGE/data/usr/bin" "$STAGE/data/etc/init.d" \
    "$STAGE/data/etc/config" "$STAGE/control" "$STAGE/apk"

tar -xJf "$OUT/$NAME.tar.xz" -C "$STAGE/data/usr/lib"
program="$STAGE/data/usr/lib/edge-runtime"
mv "$STAGE/data/usr/lib/$NAME" "$program"
install -m 0755 "$program/openwrt/edge-runtime.init" "$STAGE/data/etc/init.d/edge-runtime"
install -m 0600 "$program/openwrt/edge-runtime.config" "$STAGE/data/etc/config/edge-runtime"
# The package manager installs and removes: the installer script has no place in its copy.
rm -rf "$program/openwrt" "$program/install.sh"
ln -s ../lib/edge-runtime/edge-runtime "$STAGE/data/usr/bin/edge-runtime"
chmod -R go-w "$STAGE/data"

DESCRIPTION="QingLong edge runtime: scheduled commands with durable, fenced cancellation on one SQLite file. Built for musl $MUSL_VERSION ($LOADER), $ZIG_TARGET."
CONFFILE=/etc/config/edge-runtime

# ---- .ipk
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
Description: $DESCRIPTION
CONTROL
echo "$CONFFILE" > "$STAGE/control/conffiles"
# opkg runs these with IPKG_INSTROOT set when installing into an image: touch nothing then. On
# an upgrade (PKG_UPGRADE=1) opkg runs only the new postinst, and procd would leave the running
# service on the replaced files for a plain start: restart it, if the user left it enabled.
cat > "$STAGE/control/postinst" <<'POSTINST'
#!/bin/sh
[ -n "$IPKG_INSTROOT" ] && exit 0
if [ "$PKG_UPGRADE" = 1 ]; then
    /etc/init.d/edge-runtime enabled && /etc/init.d/edge-runtime restart
    exit 0
fi
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
tar "${tar_opts[@]}" -czf "$OUT/$BASE.ipk" -C "$STAGE" ./debian-binary ./control.tar.gz ./data.tar.gz
log "OpenWrt package (opkg): $OUT/$BASE.ipk ($(stat -c %s "$OUT/$BASE.ipk") bytes)"

# ---- .apk: the same files, plus OpenWrt's records of them (what its build adds to every apk package)
records="$STAGE/data/lib/apk/packages"
mkdir -p "$records"
(cd "$STAGE/data" && find . \( -type f -o -type l \) ! -path ./lib/apk/packages/\* -printf '/%P\n' | LC_ALL=C sort) \
    > "$records/edge-runtime.list"
echo "$CONFFILE" > "$records/edge-runtime.conffiles"
echo "$CONFFILE $(sha256sum < "$STAGE/data$CONFFILE" | cut -d' ' -f1)" > "$records/edge-runtime.conffiles_static"
chmod 0644 "$records"/edge-runtime.*
# apk runs each with the package's version as $1 (and the old one as $2 on an upgrade), in a
# cleared environment; never on removal as part of an upgrade. An upgrade restarts the service
# only where it was enabled: a user who disabled it keeps it disabled.
cat > "$STAGE/apk/post-install" <<'SCRIPT'
#!/bin/sh
[ -n "$IPKG_INSTROOT" ] && exit 0
/etc/init.d/edge-runtime enable
/etc/init.d/edge-runtime start
exit 0
SCRIPT
cat > "$STAGE/apk/post-upgrade" <<'SCRIPT'
#!/bin/sh
[ -n "$IPKG_INSTROOT" ] && exit 0
/etc/init.d/edge-runtime enabled && /etc/init.d/edge-runtime restart
exit 0
SCRIPT
cat > "$STAGE/apk/pre-deinstall" <<'SCRIPT'
#!/bin/sh
[ -n "$IPKG_INSTROOT" ] && exit 0
/etc/init.d/edge-runtime stop
/etc/init.d/edge-runtime disable
exit 0
SCRIPT
rm -f "$OUT"/edge-runtime_*.apk
SOURCE_DATE_EPOCH=0 "$BUILD_PYTHON" "$CROSS_DIR/apkv3.py" --files "$STAGE/data" --output "$OUT/$BASE.apk" \
    --info "name:edge-runtime" --info "version:$VERSION" --info "arch:$OPENWRT_ARCH" \
    --info "description:$DESCRIPTION" --info "license:Proprietary" --info "origin:edge-runtime" \
    --info "maintainer:QingLong Edge Runtime" --info "depends:libc" \
    --script "post-install:$STAGE/apk/post-install" --script "post-upgrade:$STAGE/apk/post-upgrade" \
    --script "pre-deinstall:$STAGE/apk/pre-deinstall" > /dev/null
log "OpenWrt package (apk): $OUT/$BASE.apk ($(stat -c %s "$OUT/$BASE.apk") bytes)"
