#!/bin/sh
# Runs INSIDE a copy of the musl root (build/cross/cross-test.sh), after each step of an install's
# life: the .apk as apk 3 applies it (tests/support/apk_root.py), or the tarball's installer script.
#   installed   the files, the service enabled and started; a user's UCI change and a restart; a
#               Run; a restart while a Run is running keeps both Runs' outcomes
#   upgraded    the user's settings kept, the service restarted with them, the Runs still there,
#               a new Run
#   removed     the service stopped and disabled, the program gone; the changed settings and the
#               database kept
# Usage: openwrt-lifecycle.sh installed|upgraded|removed apk|installer
set -eu
PHASE="$1"; HOW="$2"
ER=/usr/bin/edge-runtime
INIT=/etc/init.d/edge-runtime
CONFIG=/etc/config/edge-runtime
DB=/mnt/usb/edge-runtime/edge-runtime.db
export PATH=/usr/sbin:/usr/bin:/sbin:/bin EDGE_RUNTIME_DB="$DB"
fail() { echo "openwrt-lifecycle ($HOW, $PHASE): FAILED: $*" >&2; cat /tmp/procd-test.log >&2 2>/dev/null || true; exit 1; }
say() { echo "openwrt-lifecycle ($HOW, $PHASE): $*"; }

alive() { [ -d "/proc/$1" ] && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }
service_pid() { cat /var/run/procd-test.pid 2>/dev/null || true; }
check_service() { # ARGS...: the service runs, and its command line holds each of ARGS
    pid=$(service_pid)
    [ -n "$pid" ] && alive "$pid" || fail "the service is not running"
    cmdline=$(tr '\0' ' ' < "/proc/$pid/cmdline")
    for arg in "$@"; do
        case "$cmdline" in *"$arg"*) ;; *) fail "the service's command line lacks '$arg': $cmdline" ;; esac
    done
}
wait_status() { # RUN STATUS
    i=0
    until "$ER" show "$1" --json | grep -q "\"status\":\"$2\""; do
        i=$((i + 1)); [ "$i" -lt 600 ] || { "$ER" show "$1" >&2; fail "run $1 did not reach $2"; }
        sleep 0.1
    done
}
user_settings() { grep -q "option db '$DB'" "$CONFIG" && grep -q "option slots '1'" "$CONFIG"; }

case "$PHASE" in
installed)
    [ -x "$ER" ] && [ -x "$INIT" ] && [ -f "$CONFIG" ] || fail "files missing"
    [ "$(stat -c '%a %u %g' "$CONFIG")" = "600 0 0" ] || fail "$CONFIG is not root's with mode 0600: $(ls -ln "$CONFIG")"
    [ -e /etc/rc.d/S95edge-runtime ] || fail "the service was not enabled"
    say "$("$ER" --version)"
    check_service "--db /etc/edge-runtime/edge-runtime.db serve"
    # A user's UCI change: the database on "USB storage" and one slot.
    sed -i "s|option db '.*'|option db '$DB'|; s|option slots '.*'|option slots '1'|" "$CONFIG"
    "$INIT" restart
    check_service "--db $DB serve" "--slots 1"
    i=0; until [ -e "$DB" ]; do i=$((i + 1)); [ "$i" -lt 600 ] || fail "no database"; sleep 0.1; done
    A=$("$ER" submit --name first -- sh -c "echo hello from $HOW")
    wait_status "$A" succeeded
    "$ER" logs "$A" | grep -q "hello from $HOW" || fail "no output"
    # A restart while a Run runs: the Run keeps running, the new service adopts it, it ends well.
    rm -f /tmp/lifecycle-go
    B=$("$ER" submit --name across -- sh -c 'while [ ! -e /tmp/lifecycle-go ]; do sleep 0.1; done; echo finished after the restart')
    wait_status "$B" running
    "$INIT" restart
    check_service "--db $DB serve"
    touch /tmp/lifecycle-go
    wait_status "$B" succeeded
    "$ER" logs "$B" | grep -q "finished after the restart" || fail "the adopted Run's output is missing"
    "$ER" show "$A" --json | grep -q '"status":"succeeded"' || fail "the first Run's outcome changed"
    echo "$A $B" > /tmp/lifecycle-runs
    service_pid > /tmp/lifecycle-pid
    say "passed: service $(service_pid), Runs $A $B"
    ;;
upgraded)
    user_settings || fail "the user's settings were not kept: $(cat "$CONFIG")"
    if [ "$HOW" = apk ]; then
        # apk keeps a changed file under /etc and writes its own beside it.
        [ -f "$CONFIG.apk-new" ] || fail "no $CONFIG.apk-new"
    fi
    [ -e /etc/rc.d/S95edge-runtime ] || fail "the service is no longer enabled"
    check_service "--db $DB serve" "--slots 1"
    [ "$(service_pid)" != "$(cat /tmp/lifecycle-pid)" ] || fail "the service was not restarted"
    for run in $(cat /tmp/lifecycle-runs); do
        "$ER" show "$run" --json | grep -q '"status":"succeeded"' || fail "Run $run lost its outcome"
    done
    C=$("$ER" submit --name after -- sh -c 'echo after the upgrade')
    wait_status "$C" succeeded
    service_pid > /tmp/lifecycle-pid
    say "passed: service $(service_pid), Run $C"
    ;;
removed)
    pid=$(cat /tmp/lifecycle-pid)
    i=0; while alive "$pid"; do i=$((i + 1)); [ "$i" -lt 300 ] || fail "the service still runs"; sleep 0.1; done
    [ ! -e /etc/rc.d/S95edge-runtime ] || fail "the service is still enabled"
    for path in "$ER" "$INIT" /usr/lib/edge-runtime /lib/apk/packages/edge-runtime.list "$CONFIG.apk-new"; do
        [ ! -e "$path" ] && [ ! -L "$path" ] || fail "$path is still there"
    done
    user_settings || fail "the changed settings were not kept"
    [ -s "$DB" ] || fail "the database was not kept"
    say "passed"
    ;;
*)
    fail "unknown phase"
    ;;
esac
