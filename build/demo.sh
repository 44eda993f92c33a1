#!/bin/sh
# `make run`: start the service on a demo database of its own (under the checkout, never the
# user's default one), submit a demo command, cancel it while it runs, and show what happened.
# Uses only the public CLI, as a user on the device would.
set -eu

# The demo's own database: the commands below read $EDGE_RUNTIME_DB like --db.
EDGE_RUNTIME_DB=${DEMO_DB:-$(pwd)/.demo/edge-runtime.db}
export EDGE_RUNTIME_DB

ER=${EDGE_RUNTIME:-.venv/bin/edge-runtime}
GRACE_MS=${DEMO_GRACE_MS:-3000}

say() { printf '\n== %s\n' "$*"; }

wait_for_status() { # RUN STATUS SECONDS
    i=0
    while [ "$i" -lt $(( $3 * 10 )) ]; do
        if "$ER" show "$1" --json | grep -q "\"status\":\"$2\""; then return 0; fi
        sleep 0.1
        i=$((i + 1))
    done
    echo "Error: run $1 did not reach status $2 within $3 s" >&2
    "$ER" show "$1" >&2 || true
    return 1
}

wait_for_service() { # SECONDS: until the service's log says it serves the database
    i=0
    while ! grep -q 'recovery.done' "$SERVE_LOG"; do
        if ! kill -0 "$SERVICE" 2>/dev/null || [ "$i" -ge $(( $1 * 10 )) ]; then
            echo "Error: the service did not start serving $EDGE_RUNTIME_DB within $1 s; its log:" >&2
            cat "$SERVE_LOG" >&2
            return 1
        fi
        sleep 0.1
        i=$((i + 1))
    done
}

say "edge-runtime $("$ER" --version | cut -d' ' -f2) on $("$ER" migrate)"

say "starting the service (grace ${GRACE_MS} ms)"
# Its own log goes to a file beside the database (shown at the end): the demo waits until it says
# the service serves the database, so the first submit finds it (no "no service is running" note).
SERVE_LOG=$(dirname "$EDGE_RUNTIME_DB")/serve.log
"$ER" serve --grace-ms "$GRACE_MS" 2>"$SERVE_LOG" &
SERVICE=$!
trap 'kill -TERM "$SERVICE" 2>/dev/null || true; wait "$SERVICE" 2>/dev/null || true' EXIT INT TERM
wait_for_service 30
echo "serving (its log: $SERVE_LOG)"

say "submitting a demo command that runs for a minute unless cancelled"
RUN=$("$ER" submit --name demo -- sh -c 'echo "demo: started as pid $$"; trap "echo demo: got SIGTERM, exiting; exit 143" TERM; sleep 60 & wait')
echo "run id: $RUN"
wait_for_status "$RUN" running 15
"$ER" show "$RUN"

say "cancelling it"
"$ER" cancel "$RUN" --reason "make run demo"
wait_for_status "$RUN" cancelled 15
"$ER" show "$RUN"

say "its event log"
"$ER" events "$RUN"

say "its output"
"$ER" logs "$RUN"

say "stopping the service"
kill -TERM "$SERVICE"
wait "$SERVICE" || true
trap - EXIT INT TERM

say "the service's own log"
cat "$SERVE_LOG"

say "database check"
"$ER" check
