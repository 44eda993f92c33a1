"""The web panel in a real browser (Debian's chromium, headless, driven by playwright-core from
tests/browser/): log in, run a command and watch it succeed, read its log, cancel a long run, add
a schedule, log out, in English and in Chinese; the accessible names stay English in both.
Screenshots are kept in ``$EDGE_BROWSER_OUTPUT`` (default ``.test-output/browser/``).

``make test-browser`` installs what it needs (``apt-get install chromium``, ``npm ci``); the plain
``make test`` skips these tests, saying why, where chromium or playwright-core is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from tests.support.panel_client import PASSWORD, start_panel

from edge_runtime.local.database import open_database
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.local.schedules import LocalScheduleRepository

ROOT = Path(__file__).resolve().parents[2]
BROWSER_DIR = ROOT / "tests" / "browser"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
OUTPUT = Path(os.environ.get("EDGE_BROWSER_OUTPUT", ROOT / ".test-output" / "browser"))

_missing = [what for what, ok in (
    (f"chromium ({CHROMIUM}; `make test-browser` installs Debian's)", os.access(CHROMIUM, os.X_OK)),
    ("node", shutil.which("node") is not None),
    ("playwright-core (tests/browser/node_modules; `make test-browser` runs npm ci)",
     (BROWSER_DIR / "node_modules" / "playwright-core").is_dir()),
) if not ok]
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(bool(_missing), reason="browser test: missing " + ", ".join(_missing))]


@pytest.mark.parametrize("language", ["en-US", "zh-CN"])
def test_the_panel_in_a_browser(harness, language) -> None:
    _service, port = start_panel(harness)
    done = subprocess.run(
        ["node", str(BROWSER_DIR / "panel_flow.mjs"), f"http://127.0.0.1:{port}/", PASSWORD, str(OUTPUT), language],
        capture_output=True, text=True, timeout=240, cwd=BROWSER_DIR, env={**os.environ, "CHROMIUM": CHROMIUM},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["problems"] == []
    assert seen["cancelled"] and seen["schedule"] and seen["loggedOut"]
    assert "hello-from-the-panel-2" in seen["log"]
    if language == "zh-CN":
        assert seen["heading"] == "边缘运行时" and seen["wrongPasswordText"] == "密码错误。"
        none = {"runs": "暂无运行记录。", "schedules": "暂无定时任务。"}
    else:
        assert seen["heading"] == "Edge Runtime" and seen["wrongPasswordText"] == "Wrong password."
        none = {"runs": "No runs yet.", "schedules": "No schedules."}
    columns = {"runs": 6, "schedules": 5}
    assert seen["emptyLists"] == {
        name: {"text": none[name], "rows": 1, "span": columns[name], "columns": columns[name]} for name in none
    }
    with open_database(harness.db_path, create=False) as db:
        runs = LocalRunRepository(db).list_runs(limit=10)
        statuses = sorted(r.status.value for r in runs)
        assert statuses == ["cancelled", "succeeded", "succeeded", "succeeded"]
        assert [s.expression for s in LocalScheduleRepository(db).list()] == ["30 3 * * *"]
        assert db.connection.execute("SELECT count(*) FROM panel_sessions").fetchone()[0] == 0  # logged out
    for step in ("1-login-refused", "2-run-succeeded", "3-run-cancelled", "4-schedule-added", "5-logged-out"):
        assert (OUTPUT / f"{language}-{step}.png").stat().st_size > 0
    (OUTPUT / f"{language}-figures.json").write_text(json.dumps({"clickRunToShownRunningMs": seen["runningMs"]}))
