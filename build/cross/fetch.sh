#!/usr/bin/env bash
# Download every input of the cross build from the package registries into $CROSS_CACHE/dl and check
# each against build/cross/inputs.lock (name, version, sha256, file). Nothing else is downloaded:
#   PyPI: ziglang (the cross C compiler), apsw, msgspec, pyinstaller sdists, the h11 wheel (pure Python);
#   npm: better-sqlite3 (its tarball carries the SQLite amalgamation apsw is compiled with);
#   Debian 12 (apt-get source / apt-get download with a private state dir, so the host's apt
#   configuration is left alone): CPython 3.11, zlib, libffi, musl sources; musl and
#   busybox-static binaries of the target's architecture for the musl root. apt checks every
#   download against Debian's signed Release/Sources/Packages (the host's Debian keyring; nothing
#   here allows unauthenticated packages). A Debian point release may replace a pinned revision:
#   see need_debian below and debian_pins.py for what may stand in, EDGE_CROSS_EXACT_INPUTS=1 for none.
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
    APT_UPDATED_NOW=1
}
APT_UPDATED_NOW=0

verify() { # verify NAME [FILE]: FILE (default: the one in the lock) exists in $DL with the locked sha256
    local file sum
    file="${2:-$(lock_field "$1" 4)}"; sum="$(lock_field "$1" 3)"
    [ -f "$DL/$file" ] || return 1
    echo "$sum  $DL/$file" | sha256sum -c --quiet - || { echo "Error: checksum mismatch for $DL/$file" >&2; rm -f "$DL/$file"; return 2; }
}

# What was actually used, one line per input: name version sha256 file how pinned-version, where
# how is "pinned" (exactly the lock's file), "same-orig" (a newer Debian revision delivered the
# source tarball with the pinned sha256) or "apt-verified" (a newer Debian revision of a binary
# package, checked by apt against Debian's signed Release/Packages; its own sha256 is recorded).
# Written to $TARGET_DIR/inputs.used; package.py puts it into the artifact's build-info.json.
USED="$(mktemp)"; trap 'rm -f "$USED"' EXIT
use() { echo "$*" >> "$USED"; }

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

need() { # need NAME pypi|npm|debsrc|deb. PyPI and npm keep every release: only the pinned file will do.
    case "$2" in debsrc) need_debian "$1" src; return ;; deb) need_debian "$1" bin; return ;; esac
    if ! verify "$1"; then
        log "fetch $1 $(lock_field "$1" 2)"
        "fetch_$2" "$1"
        verify "$1" || { echo "Error: $1: $(lock_field "$1" 4) missing after download" >&2; exit 1; }
    fi
    use "$1 $(lock_field "$1" 2) $(lock_field "$1" 3) $(lock_field "$1" 4) pinned $(lock_field "$1" 2)"
}

# Debian drops a package's old revision at each point release. debian_pins.py decides which
# version may stand in for a pin (the pin, else a newer revision of the same upstream version,
# else none; only the pin under EDGE_CROSS_EXACT_INPUTS=1); apt's lists are refreshed once when the
# pin or its download is missing (a cache older than the point release).
EXACT="${EDGE_CROSS_EXACT_INPUTS:-0}"
debian_choice() { # debian_choice NAME src|bin: the version to download, from apt's lists
    local name="$1" pinned; pinned="$(lock_field "$1" 2)"
    local flags=(); [ "$EXACT" = 1 ] && flags=(--exact)
    if [ "$2" = src ]; then
        apt-cache "${APT_OPTS[@]}" showsrc --only-source "$name" 2>/dev/null | awk '/^Version:/ { print $2 }'
    else
        apt-cache "${APT_OPTS[@]}" show "$name" 2>/dev/null | awk '/^Version:/ { print $2 }'
    fi | "$BUILD_PYTHON" "$CROSS_DIR/debian_pins.py" choose "$pinned" "${flags[@]}"
}

debian_download() { # debian_download NAME src|bin VERSION
    local pkg="${1%%:*}" arch=""; [ "$1" != "$pkg" ] && arch=":${1#*:}"
    if [ "$2" = src ]; then
        (cd "$DL" && apt-get "${APT_OPTS[@]}" -qq source --download-only "$pkg=$3" >/dev/null)
    else
        (cd "$DL" && apt-get "${APT_OPTS[@]}" -qq download "$pkg$arch=$3" >/dev/null)
    fi
}

deb_file() { echo "${1%%:*}_${2//:/%3a}_${1#*:}.deb"; } # deb_file PKG:ARCH VERSION: apt's file name

debian_get() { # debian_get NAME src|bin VERSION: download it (a binary already downloaded is kept)
    local file
    [ "$3" = "$(lock_field "$1" 2)" ] && log "fetch $1 $3" || log "fetch $1 $3 (pinned $(lock_field "$1" 2) is gone)"
    if [ "$2" = bin ]; then
        file="$(deb_file "$1" "$3")"
        [ -f "$DL/$file.sha256" ] && (cd "$DL" && sha256sum -c --quiet "$file.sha256" 2>/dev/null) && return 0
    fi
    debian_download "$1" "$2" "$3"
}

need_debian() { # need_debian NAME src|bin
    local name="$1" kind="$2" pinned version file sum how
    pinned="$(lock_field "$name" 2)"; file="$(lock_field "$name" 4)"; sum="$(lock_field "$name" 3)"
    # Already here: the pinned file; or, for a source package, its orig tarball (same sha256) from
    # the revision named in the .debian-version note fetch left beside it.
    if verify "$name"; then
        version="$pinned"
        [ "$kind" = src ] && [ -f "$DL/$file.debian-version" ] && version="$(cat "$DL/$file.debian-version")"
        if [ "$version" = "$pinned" ]; then use "$name $pinned $sum $file pinned $pinned"; return 0; fi
        if [ "$EXACT" != 1 ]; then use "$name $version $sum $file same-orig $pinned"; return 0; fi
    fi
    apt_ready
    # A miss with lists older than this run (they may predate the point release): refresh, retry once.
    if ! version="$(debian_choice "$name" "$kind" 2>/dev/null)" || ! debian_get "$name" "$kind" "$version"; then
        [ "$APT_UPDATED_NOW" = 1 ] || { log "refreshing Debian's package lists"; rm -f "$APT_DIR/.updated"; apt_ready; }
        version="$(debian_choice "$name" "$kind")" || exit 1
        debian_get "$name" "$kind" "$version" || { echo "Error: $name $version: download failed" >&2; exit 1; }
    fi
    [ "$kind" = bin ] && file="$(deb_file "$name" "$version")"
    if [ "$kind" = src ]; then
        # All the build takes from a source package is its upstream tarball: it must be the pinned one.
        verify "$name" || { echo "Error: $name $version: its orig tarball $file is not the pinned upstream source" \
            "(sha256 $sum): refusing it; review the new upstream source and update build/cross/inputs.lock" >&2; exit 1; }
        echo "$version" > "$DL/$file.debian-version"
        how=same-orig
    else
        [ -f "$DL/$file" ] || { echo "Error: $name $version: $DL/$file missing after download" >&2; exit 1; }
        (cd "$DL" && sha256sum "$file" > "$file.sha256")
        sum="$(cut -d' ' -f1 < "$DL/$file.sha256")"
        how=apt-verified
        if [ "$version" = "$pinned" ]; then verify "$name" || exit 1; fi
    fi
    [ "$version" = "$pinned" ] && how=pinned
    use "$name $version $sum $file $how $pinned"
}

need ziglang pypi
need apsw pypi
need msgspec pypi
need h11 pypi
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
mkdir -p "$TARGET_DIR"
chmod 644 "$USED" && mv "$USED" "$TARGET_DIR/inputs.used"; trap - EXIT
if grep -qv ' pinned [^ ]*$' "$TARGET_DIR/inputs.used"; then
    log "inputs for $TARGET: Debian revisions newer than the lock's (its pins are gone from the archive):"
    grep -v ' pinned [^ ]*$' "$TARGET_DIR/inputs.used" | sed 's/^/   /'
fi
log "inputs for $TARGET checked against build/cross/inputs.lock; used: $TARGET_DIR/inputs.used"
