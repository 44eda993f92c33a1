#!/bin/sh
# Runs INSIDE a copy of the musl root (build/cross/cross-test.sh): install the .ipk as opkg would
# (data into /, then postinst), with a UCI setting changed, and check that the procd init script
# starts a working service with it, that an upgrade's postinst restarts it and that prerm stops
# and disables it. Usage: openwrt-test.sh IPK
set -eu
IPK="$1"
fail() { echo "openwrt-test: FAILED: $*" >&2; cat /tmp/procd-test.log >&2 2>/dev/null || true; exit 1; }
mkdir -p /tmp/ipk/control /var/run
cd /tmp/ipk
tar -xzf "$IPK"
[ "$(cat debian-binary)" = 2.0 ] || fail "debian-binary"
tar -xzf control.tar.gz -C control
grep -q "^Architecture: " control/control || fail "no Architecture in control"
tar -xzf data.tar.gz -C /
cd /
[ -x /usr/bin/edge-runtime ] && [ -x /etc/init.d/edge-runtime ] && [ -f /etc/config/edge-runtime ] || fail "files missing"
echo "openwrt-test: installed $(sed -n 's/^Version: //p' /tmp/ipk/control/control) for $(sed -n 's/^Architecture: //p' /tmp/ipk/control/control)"
/usr/bin/edge-runtime --version
cp /tmp/openwrt-rc-common.sh /etc/rc.common
# A user's UCI change: the database on "USB storage" and one slot.
sed -i "s|option db '.*'|option db '/mnt/usb/edge-runtime/edge-runtime.db'|; s|option slots '.*'|option slots '1'|" \
    /etc/config/edge-runtime
IPKG_INSTROOT= sh /tmp/ipk/control/postinst
[ -L /etc/rc.d/S95edge-runtime ] || fail "postinst did not enable the service"
PID=$(cat /var/run/procd-test.pid)
CMDLINE=$(tr '\0' ' ' < "/proc/$PID/cmdline")
echo "openwrt-test: service pid $PID: $CMDLINE"
case "$CMDLINE" in *"--db /mnt/usb/edge-runtime/edge-runtime.db serve"*"--slots 1"*) ;; *) fail "UCI settings not applied" ;; esac
export EDGE_RUNTIME_DB=/mnt/usb/edge-runtime/edge-runtime.db
i=0; until [ -e "$EDGE_RUNTIME_DB" ]; do i=$((i + 1)); [ "$i" -lt 600 ] || fail "no database"; sleep 0.1; done
RUN=$(/usr/bin/edge-runtime submit --name openwrt -- sh -c 'echo hello from the package')
i=0
until /usr/bin/edge-runtime show "$RUN" --json | grep -q '"status":"succeeded"'; do
    i=$((i + 1)); [ "$i" -lt 600 ] || { /usr/bin/edge-runtime show "$RUN" >&2; fail "run did not succeed"; }
    sleep 0.1
done
/usr/bin/edge-runtime logs "$RUN" | grep -q 'hello from the package' || fail "no output"
# An upgrade (opkg runs the new postinst with PKG_UPGRADE=1) restarts the enabled service.
IPKG_INSTROOT= PKG_UPGRADE=1 sh /tmp/ipk/control/postinst
NEW_PID=$(cat /var/run/procd-test.pid)
[ "$NEW_PID" != "$PID" ] && [ -d "/proc/$NEW_PID" ] || fail "the upgrade did not restart the service"
/usr/bin/edge-runtime show "$RUN" --json | grep -q '"status":"succeeded"' || fail "the Run lost its outcome"
/etc/init.d/edge-runtime stop
grep -q 'service.stopped' /tmp/procd-test.log || fail "service did not stop cleanly"
IPKG_INSTROOT= sh /tmp/ipk/control/prerm
[ ! -e /etc/rc.d/S95edge-runtime ] || fail "prerm did not disable the service"
echo "openwrt-test: passed"
