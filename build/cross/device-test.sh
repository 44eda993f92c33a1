#!/bin/sh
# Runs INSIDE the target's musl root (chroot, under qemu-user; build/cross/cross-test.sh starts it):
# busybox sh, no /etc/passwd, an empty environment as procd gives. Usage: device-test.sh ER
# where ER is the edge-runtime executable to test (one-folder build unpacked under /opt).
set -eu
ER="$1"
export PATH=/bin:/usr/bin
fail() { echo "device-test: FAILED: $*" >&2; exit 1; }
say() { printf '\n== device-test: %s\n' "$*"; }
json_field() { # json_field NAME JSON: the first numeric "NAME":N in JSON
    printf '%s' "$2" | sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p"
}
wait_status() { # RUN STATUS SECONDS
    i=0
    while [ "$i" -lt $(( $3 * 10 )) ]; do
        "$ER" show "$1" --json | grep -q "\"status\":\"$2\"" && return 0
        sleep 0.1; i=$((i + 1))
    done
    "$ER" show "$1" >&2 || true
    fail "run $1 did not reach $2 within $3 s"
}

say "no HOME, no passwd entry: --version works, a command without a database path says why"
env -i "$ER" --version
if env -i "$ER" list > /tmp/nohome.out 2>&1; then fail "list without a database path succeeded"; fi
grep -q 'DB_PATH_UNKNOWN' /tmp/nohome.out || { cat /tmp/nohome.out; fail "no DB_PATH_UNKNOWN error"; }
grep -q Traceback /tmp/nohome.out && fail "a traceback instead of an error line"

export EDGE_RUNTIME_DB=/var/lib/edge-test/edge-runtime.db
rm -rf /var/lib/edge-test

say "build/demo.sh: serve, submit, cancel"
EDGE_RUNTIME="$ER" DEMO_GRACE_MS=3000 sh /opt/edge-test/demo.sh

say "process group and restart re-adoption"
"$ER" serve --grace-ms 3000 2> /tmp/serve1.log &
SERVICE=$!
RUN=$("$ER" submit --name readopt -- sh -c 'sleep 300 & wait')
wait_status "$RUN" running 60
SHOW=$("$ER" show "$RUN" --json)
PID=$(json_field pid "$SHOW"); PGID=$(json_field pgid "$SHOW")
[ -n "$PID" ] && [ "$PID" = "$PGID" ] || fail "recorded pgid $PGID is not the Attempt's pid $PID"
KERNEL_PGID=$(cut -d' ' -f5 "/proc/$PID/stat")
[ "$KERNEL_PGID" = "$PID" ] || fail "the kernel says pgid $KERNEL_PGID for pid $PID"
echo "attempt pid $PID, recorded pgid $PGID, kernel pgid $KERNEL_PGID"
kill -TERM "$SERVICE"; wait "$SERVICE" || true
[ -d "/proc/$PID" ] || fail "the Attempt died with the service"
"$ER" serve --grace-ms 3000 2> /tmp/serve2.log &
SERVICE=$!
i=0
until grep -q "attempt.adopted run=$RUN" /tmp/serve2.log; do
    i=$((i + 1)); [ "$i" -lt 600 ] || { cat /tmp/serve2.log >&2; fail "the restarted service did not re-adopt $RUN"; }
    sleep 0.1
done
grep "attempt.adopted" /tmp/serve2.log
"$ER" cancel "$RUN" --reason "device test"
wait_status "$RUN" cancelled 60
i=0
while [ -d "/proc/$PID" ] && ! grep -q '^State:.*Z' "/proc/$PID/status" 2>/dev/null; do
    i=$((i + 1)); [ "$i" -lt 100 ] || fail "process group $PGID still alive after cancel"
    sleep 0.1
done
"$ER" events "$RUN" | tail -4
kill -TERM "$SERVICE"; wait "$SERVICE" || true
grep -q 'pid_mismatch\|identity_mismatch' /tmp/serve1.log /tmp/serve2.log && fail "identity mismatch logged"

say "a restart never changes a Run's outcome: ends during and after a restart, with the monitor"
"$ER" serve --slots 3 --grace-ms 3000 2> /tmp/serve3.log &
SERVICE=$!
GO=/tmp/device-test-go; rm -f "$GO"
OK=$("$ER" submit -- sh -c "while [ ! -e $GO ]; do sleep 0.1; done; echo finished ok; exit 0")
GAP=$("$ER" submit -- sh -c "while [ ! -e $GO ]; do sleep 0.1; done; echo in the gap; exit 3")
SIG=$("$ER" submit -- sh -c "while [ ! -e $GO ]; do sleep 0.1; done; kill -USR1 \$\$")
wait_status "$OK" running 60; wait_status "$GAP" running 60; wait_status "$SIG" running 60
kill -KILL "$SERVICE"; wait "$SERVICE" || true
touch "$GO"  # all three end while no service runs; their monitors keep the ends
sleep 2
"$ER" serve --slots 3 --grace-ms 3000 2> /tmp/serve4.log &
SERVICE=$!
wait_status "$OK" succeeded 60
"$ER" logs "$OK" | grep -q "finished ok" || fail "the output written while no service ran is missing"
wait_status "$GAP" failed 60
"$ER" show "$GAP" --json | grep -q '"exitCode":3' || fail "the real exit code 3 was not recorded"
wait_status "$SIG" failed 60
# 128 + the signal's number on this target: 138 on ARM and x86, 144 on MIPS (SIGUSR1 is 16 there).
USR1_EXIT=$((128 + $(kill -l USR1)))
"$ER" show "$SIG" --json | grep -q "\"exitCode\":$USR1_EXIT" \
    || fail "the signal death (SIGUSR1, $USR1_EXIT) was not recorded"
"$ER" show "$SIG" | grep -q "SIGUSR1" || fail "the signal is not named"
kill -TERM "$SERVICE"; wait "$SERVICE" || true
"$ER" check > /dev/null
say "passed"
