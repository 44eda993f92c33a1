#!/usr/bin/env bash
# Download every input of the cross build from the package registries into $CROSS_CACHE/dl and check
# each against build/cross/inputs.lock (name, version, sha256, file). Nothing else is downloaded:
#   PyPI: ziglang (the cross C compiler), apsw, msgspec, pyinstaller sdists;
#   npm: better-sqlite3 (its tarball carries the SQLite amalgamation apsw is compiled with);
#   Debian 12 (apt-get source / apt-get download with a private state dir, so the host's apt
#   configuration is left alone): CPython 3.11, zlib, libffi, musl sources; musl and
#   busybox-static binaries of the target's architecture for the musl root.
# Usage: fetch.sh TARGET
source "$(dirname "$0")/env.sh"
TARGET="${1:-${TARGET:-}}"
source "$CROSS_DIR/targets.sh"
mkdir -p "$DL"

APT_DIR="$CROSS_CACHE/apt"
APT_OPTS=(-o "Dir::Etc::SourceList=$APT_DIR/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$APT_DIR/lists" -o "Dir::Cache=$APT_DIR/cache" -o Dir::State::status=/dev/null
    -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
for arch in arm64 mipsel armhf; do APT_OPTS+=(-o "APT::Architectures::=$arch"); done

apt_ready() {
    [ -f "$APT_DIR/.updated" ] && return 0
    mkdir -p "$APT_DIR/lists/partial" "$APT_DIR/cache/archives/partial"
    # The same Debian repository the host uses, plus its deb-src lines.
    cat > "$APT_DIR/sources.list" <<'SRC'
deb [arch=arm64,armhf,mipsel] http://deb.debian.org/debian bookworm main
deb-src http://deb.debian.org/debian bookworm main
SRC
    apt-get "${APT_OPTS[@]}" -qq update
    touch "$APT_DIR/.updated"
}

verify() { # verify NAME: the file named in the lock exists in $DL with the locked sha256
    local file sum
    file="$(lock_field "$1" 4)"; sum="$(lock_field "$1" 3)"
    [ -f "$DL/$file" ] || return 1
    echo "$sum  $DL/$file" | sha256sum -c --quiet - || { echo "Error: checksum mismatch for $DL/$file" >&2; rm -f "$DL/$file"; return 2; }
}

fetch_pypi() { # fetch_pypi NAME: the locked file from PyPI's simple index (sha256 from the index too)
    local name="$1" file; file="$(lock_field "$name" 4)"
    "$BUILD_PYTHON" - "$name" "$file" "$DL" <<'PY'
import json, sys, urllib.request
name, file, dest = sys.argv[1:]
req = urllib.request.Request(f"https://pypi.org/simple/{name}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
entry = next(f for f in json.load(urllib.request.urlopen(req, timeout=120))["files"] if f["filename"] == file)
with urllib.request.urlopen(entry["url"], timeout=600) as src, open(f"{dest}/{file}.part", "wb") as out:
    while chunk := src.read(1 << 20):
        out.write(chunk)
PY
    mv "$DL/$file.part" "$DL/$file"
}

fetch_npm() { # fetch_npm NAME
    local name="$1" version; version="$(lock_field "$1" 2)"
    (cd "$DL" && npm pack --silent "$name@$version" >/dev/null)
}

fetch_debsrc() { # fetch_debsrc SRCPKG: the upstream tarball of a Debian source package
    local name="$1" version; version="$(lock_field "$1" 2)"
    apt_ready
    (cd "$DL" && apt-get "${APT_OPTS[@]}" -qq source --download-only "$name=$version" >/dev/null)
}

fetch_deb() { # fetch_deb PKG:ARCH
    local name="$1" version; version="$(lock_field "$1" 2)"
    apt_ready
    (cd "$DL" && apt-get "${APT_OPTS[@]}" -qq download "$name=$version" >/dev/null)
}

need() { # need NAME KIND
    verify "$1" && return 0
    log "fetch $1 $(lock_field "$1" 2)"
    "fetch_$2" "$1"
    verify "$1" || { echo "Error: $1: $(lock_field "$1" 4) missing after download" >&2; exit 1; }
}

need ziglang pypi
need apsw pypi
need msgspec pypi
need pyinstaller pypi
need altgraph pypi
need packaging pypi
need pyinstaller-hooks-contrib pypi
need better-sqlite3 npm
need python3.11 debsrc
need zlib debsrc
need libffi debsrc
need "busybox-static:$DEB_ARCH" deb
if [ "$MUSL_FROM" = debian ]; then need "musl:$DEB_ARCH" deb; else need musl debsrc; fi
log "inputs for $TARGET verified against build/cross/inputs.lock"
