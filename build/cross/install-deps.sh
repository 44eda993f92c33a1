#!/usr/bin/env bash
# Host tools of the cross build, from Debian's packages (installed only when missing):
# qemu-user-static (runs target programs; its binfmt definitions), llvm (readelf/strip/objcopy
# for any architecture), Debian's own python3.11 (the build Python of the target's CPython),
# xz-utils; npm fetches the SQLite amalgamation (better-sqlite3).
set -euo pipefail
need=()
command -v qemu-aarch64-static >/dev/null || need+=(qemu-user-static)
command -v llvm-readelf >/dev/null || need+=(llvm)
[ -x /usr/bin/python3.11 ] || need+=(python3.11)
command -v xz >/dev/null || need+=(xz-utils)
command -v npm >/dev/null || need+=(npm)
command -v unshare >/dev/null || need+=(util-linux)
if [ ${#need[@]} -gt 0 ]; then
    echo "== apt-get install ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
