#!/usr/bin/env bash
# Let the kernel run the target's executables through qemu-user (binfmt_misc), as Debian's
# qemu-user-static + binfmt-support would: the one-file bootloader re-executes itself, PyInstaller
# starts sys.executable, and the service starts /bin/sh: none of that can go through an explicit
# `qemu-… prog` prefix. The F flag opens the interpreter now, so it also works inside the musl
# root (chroot). Usage: binfmt.sh TARGET
source "$(dirname "$0")/env.sh"
TARGET="${1:-${TARGET:-}}"
source "$CROSS_DIR/targets.sh"
name="${QEMU#qemu-}"; name="qemu-${name%-static}"
BINFMT=/proc/sys/fs/binfmt_misc
[ -e "$BINFMT/register" ] || mount -t binfmt_misc binfmt_misc "$BINFMT"
if [ -e "$BINFMT/$name" ] && grep -q '^enabled' "$BINFMT/$name" && grep -q 'flags: .*F' "$BINFMT/$name"; then
    exit 0
fi
[ -e "$BINFMT/$name" ] && echo -1 > "$BINFMT/$name"   # registered without F: replace it
conf="/usr/lib/binfmt.d/$name.conf"
[ -f "$conf" ] || { echo "Error: $conf missing (apt-get install qemu-user-static)" >&2; exit 1; }
cat "$conf" > "$BINFMT/register"
log "binfmt_misc: $name registered ($(sed -n 's/^interpreter //p' "$BINFMT/$name"))"
