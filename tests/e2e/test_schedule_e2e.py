"""Schedules and timeouts end to end: a real ``serve``, the real CLI, real processes and signals."""

from __future__ import annotations

import re
import time

import apsw
import pytest

from edge_runtime.cli.common import format_ms

from edge_runtime.local.database import open_database
from edge_runtime.service.process_identity import read_stat

from tests.support.service_harness import Harness, decode_json, process_gone, wait_for

pytestmark = pytest.mark.e2e


def _slots(harness: Harness, schedule_id: str) -> list[tuple[int, str]]:
    with open_database(harness.db_path, create=False) as db:
        return db.connection.execute(
            "SELECT scheduled_for_ms, status FROM runs WHERE schedule_id = ? ORDER BY scheduled_for_ms", (schedule_id,)
        ).fetchall()


def _schedule(harness: Harness, schedule_id: str) -> dict:
    return decode_json(harness.cli("schedule", "show", schedule_id, "--json").stdout)


def test_a_schedule_fires_each_slot_once_pauses_and_is_removed(harness: Harness) -> None:
    schedule_id = harness.cli("schedule", "add", "--name", "tick", "*/1 * * * * *", "--", "true").stdout.strip()
    listed = decode_json(harness.cli("schedule", "list", "--json").stdout)
    assert [s["id"] for s in listed] == [schedule_id] and listed[0]["expression"] == "* * * * * *"
    harness.serve()
    wait_for(lambda: len([s for s in _slots(harness, schedule_id) if s[1] == "succeeded"]) >= 3, "three fires")
    slots = [slot for slot, _ in _slots(harness, schedule_id)]
    assert slots == sorted(set(slots)) and all(slot % 1000 == 0 for slot in slots)
    harness.cli("schedule", "pause", schedule_id)
    time.sleep(0.5)  # a fire already committed before the pause may still be starting
    paused_count = len(_slots(harness, schedule_id))
    time.sleep(2.5)
    assert len(_slots(harness, schedule_id)) == paused_count
    assert _schedule(harness, schedule_id)["paused"] is True
    harness.cli("schedule", "resume", schedule_id)
    wait_for(lambda: len(_slots(harness, schedule_id)) > paused_count, "a fire after resume")
    harness.cli("schedule", "remove", schedule_id)
    assert harness.cli("schedule", "show", schedule_id, check=False).returncode == 1
    runs = decode_json(harness.cli("list", "--json").stdout)
    assert all(r["scheduleId"] == schedule_id and r["name"] == "tick" for r in runs)


def test_missed_slots_fire_once_after_downtime(harness: Harness) -> None:
    schedule_id = harness.cli("schedule", "add", "@every 2s", "--", "true").stdout.strip()
    service = harness.serve()
    wait_for(lambda: _slots(harness, schedule_id), "a first fire")
    assert service.stop() == 0
    before = [slot for slot, _ in _slots(harness, schedule_id)]
    time.sleep(5.5)  # two or three slots pass while no service runs
    restarted_ms = time.time_ns() // 1_000_000
    harness.serve().wait_log("coalesced=True")
    # Judged by the slots stored, not by when the stop returned: a slot may pass while the service
    # is stopping. The first slot after the last stored one is the one fire for the downtime; no
    # other slot from before the restart fires (no burst); later slots fire as they come.
    after = [slot for slot, _ in _slots(harness, schedule_id) if slot > before[-1]]
    assert after and after[0] <= restarted_ms, f"no fire for the downtime: {before[-1]} then {after}"
    burst = [slot for slot in after[1:] if slot <= restarted_ms]
    assert not burst, f"slots missed during downtime fired one by one: {after[0]} then {burst}"
    assert _schedule(harness, schedule_id)["coalescedCount"] == 1


def test_overlap_skip_records_skipped_slots(harness: Harness) -> None:
    schedule_id = harness.cli("schedule", "add", "--overlap", "skip", "@every 1s", "--", "sleep", "2.5").stdout.strip()
    harness.serve()
    wait_for(lambda: _schedule(harness, schedule_id)["skippedCount"] >= 1, "a skipped slot")
    statuses = [status for _, status in _slots(harness, schedule_id)]
    assert statuses.count("running") <= 1  # never two Runs of the schedule at once


def test_submit_timeout_cancels_through_the_dispatch(harness: Harness) -> None:
    harness.serve(grace_ms=500)
    run_id = harness.cli("submit", "--timeout", "1s", "--", "sh", "-c", "trap '' TERM; sleep 60").stdout.strip()
    identity = harness.wait_running(run_id)
    detail = harness.wait_status(run_id, "cancelled")
    assert detail.cancel_reason == "timeout"
    assert detail.attempts[-1].killed_at_ms is not None  # SIGTERM was ignored: SIGKILL after the grace
    wait_for(lambda: process_gone(identity.pid), "the process to be gone")
    shown = harness.cli("show", run_id).stdout
    assert "(timeout)" in shown
    events = harness.events(run_id)
    assert [e.payload.get("reason") for e in events if e.type == "run.cancel_requested"] == ["timeout"]
    assert "run.cancel_dispatched" in [e.type for e in events]
    assert read_stat(identity.pid) is None or read_stat(identity.pid).is_zombie


def test_schedule_timeout_and_replace(harness: Harness) -> None:
    schedule_id = harness.cli(
        "schedule", "add", "--overlap", "replace", "--timeout", "30s", "@every 2s", "--", "sleep", "60"
    ).stdout.strip()
    harness.serve(grace_ms=500)
    wait_for(lambda: len(_slots(harness, schedule_id)) >= 2, "a second slot, replacing the first")
    with open_database(harness.db_path, create=False) as db:
        first_reason, first_status = db.connection.execute(
            "SELECT cancel_reason, status FROM runs WHERE schedule_id = ? ORDER BY scheduled_for_ms LIMIT 1",
            (schedule_id,),
        ).fetchone()
    assert first_status == "cancelled" and first_reason.startswith("replaced")
    assert _schedule(harness, schedule_id)["timeoutMs"] == 30_000


def test_reboot_fires_once_per_boot_and_never_on_a_service_restart(harness: Harness) -> None:
    reboot_id = harness.cli("schedule", "add", "@boot", "--", "true").stdout.strip()
    ticker_id = harness.cli("schedule", "add", "@every 1s", "--", "true").stdout.strip()
    assert _schedule(harness, reboot_id)["expression"] == "@reboot"

    def ticks_after(start_ms: int) -> None:  # the scheduler has ticked (and armed) since start_ms
        wait_for(lambda: any(slot > start_ms + 1000 for slot, _ in _slots(harness, ticker_id)), "ticks")

    started = time.time_ns() // 1_000_000
    service = harness.serve()
    ticks_after(started)
    assert _slots(harness, reboot_id) == []  # added during this boot: it waits for the next one
    assert service.stop() == 0

    # As if the schedule had last fired in an earlier boot of the device: this start fires it once.
    with open_database(harness.db_path, create=False) as db, db.write():
        db.connection.execute("UPDATE schedules SET boot_id = 'an-earlier-boot' WHERE id = ?", (reboot_id,))
    started = time.time_ns() // 1_000_000
    service = harness.serve()
    wait_for(lambda: len(_slots(harness, reboot_id)) == 1, "the boot's fire")
    ticks_after(started)
    assert service.stop() == 0

    started = time.time_ns() // 1_000_000
    service = harness.serve()  # a restart within the same boot
    ticks_after(started)
    assert len(_slots(harness, reboot_id)) == 1
    assert _schedule(harness, reboot_id)["nextFireAtMs"] == 9007199254740991
    assert service.stop() == 0


#: The clock of this zone jumps over 10 April every year (its DST, UTC-12, ends by 24 hours).
SKIPS_10_APRIL = "AAA-12BBB12,J1,J100/0"


def test_schedule_add_in_a_zone_that_never_shows_its_times_is_refused_at_once(harness: Harness) -> None:
    result = harness.cli("schedule", "add", "--tz", SKIPS_10_APRIL, "0 * 10 4 *", "--", "true", check=False)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == (
        f"Error: schedule expression '0 * 10 4 *' never fires in time zone '{SKIPS_10_APRIL}': that zone's clock "
        "skips every time the expression names (none shows in the 400 years searched, a whole cycle of the "
        "calendar and of the zone's rule); choose other times or another zone [SCHEDULE_NEVER_FIRES]\n")
    as_json = harness.cli("schedule", "add", "--json", "--tz", SKIPS_10_APRIL, "0 * 10 4 *", "--", "true", check=False)
    assert as_json.returncode == 1 and decode_json(as_json.stderr)["error"]["code"] == "SCHEDULE_NEVER_FIRES"
    assert decode_json(harness.cli("schedule", "list", "--json").stdout) == []


def test_serve_pauses_a_stored_schedule_that_cannot_fire_fires_the_others_and_stops_on_sigterm(
        harness: Harness) -> None:
    ticker = harness.cli("schedule", "add", "@every 1s", "--", "true").stdout.strip()
    # A row another program wrote (with apsw, as any tool may): its zone never shows the times it
    # names, and it is due now.
    now = time.time_ns() // 1_000_000
    connection = apsw.Connection(str(harness.db_path))
    try:
        connection.execute(
            "INSERT INTO schedules (id, expression, command, overlap, next_fire_at_ms, created_at_ms, updated_at_ms, "
            "time_zone) VALUES ('hostile', '0 * 10 4 *', '[\"true\"]', 'skip', ?, ?, ?, ?)",
            (now - 1000, now, now, SKIPS_10_APRIL))
    finally:
        connection.close()
    service = harness.serve()
    service.wait_log("schedule.paused_unfireable schedule=hostile")
    started = time.time_ns() // 1_000_000
    wait_for(lambda: len([slot for slot, _ in _slots(harness, ticker) if slot > started]) >= 2, "the others fire")
    assert service.stop() == 0  # SIGTERM
    shown = harness.cli("schedule", "show", "hostile").stdout
    reason = (f"schedule expression '0 * 10 4 *' never fires in time zone '{SKIPS_10_APRIL}': that zone's clock "
              "skips every time the expression names (none shows in the 400 years searched, a whole cycle of the "
              "calendar and of the zone's rule); choose other times or another zone [SCHEDULE_NEVER_FIRES]")
    assert f"state      paused\nreason     {reason}\nnext fire  - (paused)\n" in shown
    [line] = [row for row in harness.cli("schedule", "list").stdout.splitlines() if row.startswith("hostile ")]
    assert line.startswith("hostile  paused next=-  ") and line.endswith(f"reason={reason!r}")
    assert _schedule(harness, "hostile")["pauseReason"] == reason
    assert _slots(harness, "hostile") == []
    resumed = harness.cli("schedule", "resume", "hostile", check=False)
    assert resumed.returncode == 1 and resumed.stderr.rstrip().endswith("[SCHEDULE_NEVER_FIRES]")
    # Paused, it is left alone at the next start.
    restarted = time.time_ns() // 1_000_000
    again = harness.serve()
    wait_for(lambda: any(slot > restarted for slot, _ in _slots(harness, ticker)), "a fire after the restart")
    assert again.stop() == 0 and "paused_unfireable" not in again.log()


def test_a_schedules_task_runs_in_the_schedules_zone_and_a_hand_submitted_one_in_the_devices(harness: Harness) -> None:
    from edge_runtime.contract.device import device_time_zone
    from edge_runtime.contract.time_zones import time_zone

    harness.env.pop("TZ", None)  # the service and the CLI read the device's zone from /etc
    device_zone = device_time_zone({})
    printing = ["sh", "-c", "date +%z; echo TZ=$TZ"]
    shanghai = harness.cli("schedule", "add", "--tz", "CST-8", "@daily", "--", *printing).stdout.strip()
    own_tz = harness.cli("schedule", "add", "--tz", "CST-8", "--env", "TZ=EST5", "@daily", "--", *printing).stdout.strip()
    # Named by the short form `schedule list` shows first.
    short = harness.cli("schedule", "list").stdout.splitlines()[0].split()[0]
    assert short == shanghai[-8:]
    fired = harness.cli("schedule", "run", short).stdout.strip()
    kept = harness.cli("schedule", "run", own_tz[:8]).stdout.strip()
    by_hand = harness.submit(*printing)
    harness.serve()
    for run_id in (fired, kept, by_hand):
        harness.wait_status(run_id, "succeeded")
    assert harness.cli("logs", fired).stdout == "+0800\nTZ=CST-8\n"
    assert harness.cli("logs", kept).stdout == "-0500\nTZ=EST5\n"  # the schedule's own TZ wins
    assert harness.cli("logs", by_hand).stdout.splitlines()[1] == f"TZ={device_zone}"
    assert [r["id"] for r in decode_json(harness.cli("list", "--schedule", short, "--json").stdout)] == [fired]
    # One rule for shown times: the schedule's in its zone, the rest in the device's.
    shown = harness.cli("schedule", "show", short).stdout
    for line in ("next fire", "last fire"):
        assert re.search(rf"^{line}  \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d \+08:00\b", shown, re.M), shown
    run_shown = harness.cli("show", fired).stdout
    assert re.search(r"^schedule   \S+  slot \S+ \S+ \+08:00$", run_shown, re.M), run_shown
    created_ms = decode_json(harness.cli("show", fired, "--json").stdout)["createdAtMs"]
    device_offset = format_ms(created_ms, time_zone(device_zone)).split()[-1]
    assert re.search(rf"^created    \S+ \S+ {re.escape(device_offset)}$", run_shown, re.M), run_shown
