#!/bin/sh
# The edge-runtime installer for OpenWrt without a package manager: any OpenWrt from 22.03 (opkg,
# apk, or neither). It ships in the one-folder tarball beside the program it installs (openwrt/
# holds the init script and the UCI defaults) and does what the OpenWrt packages do
# (build/cross/openwrt-package.sh); docs/building.md, router builds, says when to use which.
#
#   sh install.sh install [--prefix DIR]
#       the program into DIR (default /usr/lib/edge-runtime, as the packages; a directory on USB
#       storage spares a small flash), /usr/bin/edge-runtime linking to it, the procd init script,
#       /etc/config/edge-runtime (one already there is kept); the service enabled and started
#   sh install.sh upgrade
#       run from the NEW version's unpacked tarball: the installed program replaced by this one in
#       the same directory, the init script updated, /etc/config/edge-runtime kept; the service
#       restarted if it is enabled
#   sh install.sh uninstall
#       the service stopped and disabled; the program, the link and the init script removed;
#       /etc/config/edge-runtime removed only if unchanged; the database is never touched
#
# It refuses to act on an edge-runtime that opkg or apk installed (one owner per file), and checks
# that this build runs on this router before it changes anything.
set -eu

LINK=/usr/bin/edge-runtime
INIT=/etc/init.d/edge-runtime
CONFIG=/etc/config/edge-runtime
DEFAULT_DIR=/usr/lib/edge-runtime

say() { echo "edge-runtime: $*"; }
fail() { echo "edge-runtime: error: $*" >&2; exit 1; }

usage() {
    echo "usage: sh $0 install [--prefix DIR] | upgrade | uninstall" >&2
    exit 2
}

SRC=$(cd "$(dirname "$0")" && pwd -P)

package_manager() { # the package manager that installed edge-runtime, if one did
    if [ -f /usr/lib/opkg/info/edge-runtime.control ] || grep -qsx 'Package: edge-runtime' /usr/lib/opkg/status; then
        echo opkg
    elif [ -f /lib/apk/packages/edge-runtime.list ] || grep -qsx 'P:edge-runtime' /lib/apk/db/installed; then
        echo apk
    fi
}

installed_dir() { # the directory this script installed the program in, or nothing
    [ -L "$LINK" ] || return 0
    target=$(readlink "$LINK")
    dir=${target%/edge-runtime}
    case "$dir" in /?*) ;; *) return 0 ;; esac
    [ -f "$dir/install.sh" ] && [ -d "$dir/_internal" ] && [ -x "$dir/edge-runtime" ] && echo "$dir"
    return 0
}

check_source() { # this build is whole and runs here
    for file in edge-runtime _internal openwrt/edge-runtime.init openwrt/edge-runtime.config; do
        [ -e "$SRC/$file" ] || fail "$SRC/$file is missing: unpack the whole tarball"
    done
    # The loader, the CPU and its float ABI: a build for another router fails here, not at boot.
    version=$("$SRC/edge-runtime" --version 2>&1) \
        || fail "this build does not run on this router ($version); ls /lib/ld-musl-* names the one it needs"
}

check_prefix() { # DIR: where the program may go
    case "$1" in
        /tmp|/tmp/*|/var|/var/*) fail "$1 is in RAM: the program would be gone after a reboot" ;;
        /|/usr|/usr/lib|/usr/bin|/etc|/mnt) fail "$1 is not a directory of its own" ;;
        /?*) ;;
        *) fail "--prefix needs an absolute path, not '$1'" ;;
    esac
    [ ! -e "$1" ] && [ ! -L "$1" ] || fail "$1 exists: remove it or choose another directory"
    # A missing parent of a chosen directory is an unmounted USB stick more often than a typo.
    [ "$1" = "$DEFAULT_DIR" ] || [ -d "$(dirname "$1")" ] \
        || fail "$(dirname "$1") does not exist (is the USB storage mounted?)"
}

copy_program() { # DEST: a copy of this build at DEST.new, owned by root and writable by root only
    rm -rf "$1.new"
    mkdir -p "$(dirname "$1")"
    mkdir -m 0755 "$1.new"
    cp -a "$SRC/." "$1.new/"
    chown -R 0:0 "$1.new"
    chmod -R go-w "$1.new"
}

install_init_script() {
    mkdir -p "$(dirname "$INIT")"
    cp "$SRC/openwrt/edge-runtime.init" "$INIT.new"
    chmod 0755 "$INIT.new"
    mv -f "$INIT.new" "$INIT"
}

install_config() { # keeps the user's configuration; the defaults stay beside the program
    if [ -e "$CONFIG" ]; then
        say "kept $CONFIG (this version's defaults: $1/openwrt/edge-runtime.config)"
    else
        mkdir -p "$(dirname "$CONFIG")"
        cp "$SRC/openwrt/edge-runtime.config" "$CONFIG.new"
        chmod 0600 "$CONFIG.new"
        mv -f "$CONFIG.new" "$CONFIG"
    fi
}

do_install() {
    dir=$DEFAULT_DIR
    while [ $# -gt 0 ]; do
        case "$1" in
            --prefix) [ $# -ge 2 ] || usage; dir=$2; shift 2 ;;
            *) usage ;;
        esac
    done
    dir=${dir%/}
    manager=$(package_manager)
    [ -z "$manager" ] || fail "edge-runtime is installed by $manager: upgrade or remove it with $manager"
    current=$(installed_dir)
    [ -z "$current" ] || fail "already installed in $current: run 'sh install.sh upgrade' from the new version"
    [ ! -e "$LINK" ] && [ ! -L "$LINK" ] || fail "$LINK exists and was not installed by this script"
    [ ! -e "$INIT" ] || fail "$INIT exists and was not installed by this script: remove it first"
    check_source
    check_prefix "$dir"
    say "installing $version in $dir"
    copy_program "$dir"
    mv "$dir.new" "$dir"
    ln -s "$dir/edge-runtime" "$LINK"
    install_init_script
    install_config "$dir"
    "$INIT" enable
    "$INIT" start
    say "installed: $LINK, $INIT (enabled, started), settings in $CONFIG"
}

do_upgrade() {
    [ $# -eq 0 ] || usage
    manager=$(package_manager)
    [ -z "$manager" ] || fail "edge-runtime is installed by $manager: upgrade it with $manager"
    dir=$(installed_dir)
    [ -n "$dir" ] || fail "edge-runtime is not installed by this script: use 'sh install.sh install'"
    [ "$dir" != "$SRC" ] || fail "this is the installed copy: run the install.sh of the new version's unpacked tarball"
    check_source
    say "upgrading $dir to $version"
    copy_program "$dir"
    enabled=0
    if [ -x "$INIT" ]; then
        "$INIT" enabled && enabled=1
        "$INIT" stop || true
    fi
    rm -rf "$dir.old"
    mv "$dir" "$dir.old"
    mv "$dir.new" "$dir"
    rm -rf "$dir.old"
    install_init_script
    install_config "$dir"
    if [ "$enabled" = 1 ]; then
        "$INIT" restart
        say "upgraded; the service was restarted"
    else
        say "upgraded; the service is disabled and was left stopped"
    fi
}

do_uninstall() {
    [ $# -eq 0 ] || usage
    manager=$(package_manager)
    [ -z "$manager" ] || fail "edge-runtime is installed by $manager: remove it with $manager"
    dir=$(installed_dir)
    [ -n "$dir" ] || fail "edge-runtime is not installed by this script"
    if [ -x "$INIT" ]; then
        "$INIT" stop || true
        "$INIT" disable || true
    fi
    if [ -f "$CONFIG" ] && cmp -s "$CONFIG" "$dir/openwrt/edge-runtime.config"; then
        rm -f "$CONFIG"
    elif [ -e "$CONFIG" ]; then
        say "kept $CONFIG (changed from the defaults)"
    fi
    rm -f "$INIT" "$LINK"
    rm -rf "$dir"
    say "removed; the database (option db in the settings, default /etc/edge-runtime/) is kept"
}

[ $# -ge 1 ] || usage
[ "$(id -u)" = 0 ] || fail "run as root"
action=$1
shift
case "$action" in
    install) do_install "$@" ;;
    upgrade) do_upgrade "$@" ;;
    uninstall) do_uninstall "$@" ;;
    *) usage ;;
esac
