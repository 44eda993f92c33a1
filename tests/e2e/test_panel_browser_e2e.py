"""The web panel in a real browser (Debian's chromium, headless, driven by playwright-core from
tests/browser/), at a phone's size (390x844) and a desktop's (1280x900), in Chinese and English:
log in, add an env entry and a secret, add a cron in a zone, edit it (zone, user, command,
retries), run it and follow its log
through a retry, stop a Run, disable the cron, see its Runs, page, search and filter many crons,
add a subscription and pull it,
pause it, send a test notification (and give the cron its rules), create an OpenAPI app, run the
device's checks, switch the language, log out. At every screen the page never scrolls sideways,
every control is at least 44 px tall, and a Chinese screen shows no English word outside the
device's own data (commands, names, logs, codes: marked translate="no").

Screenshots are kept in ``$EDGE_BROWSER_OUTPUT`` (default ``.test-output/browser/``, ignored by
git), with the figures of each run (first load, "Run" clicked to running): never asserted.

``make test-browser`` installs what it needs (``apt-get install chromium``, a Chinese font,
``npm ci``); the plain ``make test`` skips these tests, saying why, where chromium or
playwright-core is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from tests.support.git_sources import Repo
from tests.support.notify_receiver import Receiver
from tests.support.panel_client import PASSWORD, start_panel
from tests.support.panel_text import ALLOWED_IN_CHINESE, catalogue

from edge_runtime.local.database import open_database
from edge_runtime.local.runs import LocalRunRepository
from edge_runtime.local.schedules import LocalScheduleRepository

ROOT = Path(__file__).resolve().parents[2]
BROWSER_DIR = ROOT / "tests" / "browser"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
OUTPUT = Path(os.environ.get("EDGE_BROWSER_OUTPUT", ROOT / ".test-output" / "browser"))
SECRET = "s3cret-cookie-value-from-the-browser"

_missing = [what for what, ok in (
    (f"chromium ({CHROMIUM}; `make test-browser` installs Debian's)", os.access(CHROMIUM, os.X_OK)),
    ("git (the subscription's repository)", shutil.which("git") is not None),
    ("node", shutil.which("node") is not None),
    ("playwright-core (tests/browser/node_modules; `make test-browser` runs npm ci)",
     (BROWSER_DIR / "node_modules" / "playwright-core").is_dir()),
) if not ok]
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(bool(_missing), reason="browser test: missing " + ", ".join(_missing))]


@pytest.mark.parametrize("size", ["390x844", "1280x900"])
@pytest.mark.parametrize("language", ["zh-CN", "en"])
def test_the_panel_in_a_browser(harness, language, size) -> None:
    harness.cli("migrate")
    with Receiver("webhook") as receiver:
        harness.cli("notify", "channel", "add", "webhook", "--name", "hook", "--secret-param", f"url={receiver.url}/hook")
        harness.cli("notify", "default", "hook:on=lost")
        _browse(harness, language, size, receiver)


def _browse(harness, language, size, receiver) -> None:
    _service, port = start_panel(harness)
    mark = harness.tmp / "first-attempt-done"
    repo = Repo(harness.tmp / "src")
    repo.commit({"jd_a.js": "// cron: 15 8 * * *\n"})
    done = subprocess.run(
        ["node", str(BROWSER_DIR / "panel_flow.mjs"), f"http://127.0.0.1:{port}/", PASSWORD, str(OUTPUT), language,
         size, str(mark), repo.url],
        capture_output=True, text=True, timeout=300, cwd=BROWSER_DIR, env={**os.environ, "CHROMIUM": CHROMIUM},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["problems"] == [], seen["problems"]
    assert seen["navigatorLanguage"] == language  # chromium's own --lang, no locale emulated
    text = catalogue(language)
    assert seen["heading"] == text["title"] and seen["wrongPasswordText"] == text["e.LOGIN_FAILED"]
    assert seen["emptyCrons"] == text["noCrons"]
    assert len(seen["screens"]) == 13
    for name, screen in seen["screens"].items():
        assert screen["lang"] == language, name
        assert screen["scrollWidth"] <= screen["innerWidth"], f"{name} scrolls sideways: {screen}"
        assert screen["small"] == [], f"{name}: controls under 44 px: {screen['small']}"
        if language == "zh-CN":
            english = [w for w in screen["words"] if w not in ALLOWED_IN_CHINESE]
            assert english == [], f"{name} shows English in Chinese: {english}"

    assert seen["secretShown"] is False
    # The cron's next fire in its own zone, named: 07:30 in Shanghai, whatever the browser's zone.
    assert "07:30" in seen["cronCard"] and "(Asia/Shanghai)" in seen["cronCard"]
    assert seen["editFormZone"] == "Asia/Shanghai"
    assert "07:30" in seen["editedCard"] and "(Europe/Berlin)" in seen["editedCard"]
    assert f"{text['runsAs']} root" in seen["editedCard"]
    assert seen["detailInView"] is True
    log = seen["followedLog"]
    assert log.index("first-attempt-fails") < log.index(text["retryMark"].replace("{n}", "2")) < \
        log.index("second-attempt-ok")
    assert seen["attempts"] == 2 and seen["firstAttemptLog"].strip() == "first-attempt-fails"
    assert seen["stopped"] and seen["runsFiltered"] and seen["cronRuns"] == 1 and text["cs.disabled"] in seen["disabledCard"]
    assert "jd_a.js" in seen["pullLog"] and text["cs.disabled"] in seen["subCard"] and "0 4 * * *" in seen["subCard"]
    # 23 crons: 20 on the first page, 3 on the second; a search, a status and a label filter.
    pages = text["page"].replace("{n}", "1").replace("{of}", "2")
    assert seen["paging"] == {"first": 20, "page": pages, "second": 3}
    assert seen["searched"] == "batch-17" and seen["disabledOnly"] == "nightly-edited"
    assert seen["labelPages"] == pages and seen["noMatch"] == text["noMatch"]
    assert "hook:on=lost" in seen["defaultRules"] and text["os.sent"] in seen["testMessage"]
    assert [r.json()["title"] for r in receiver.received] == ["edge-runtime test"]
    assert f"{text['notifyRules']} hook:on=failed,timeout" in seen["editedCard"]
    assert seen["appSecretLength"] == 24 and seen["checkSummary"] == text["ready"]
    other = "en" if language == "zh-CN" else "zh-CN"
    assert seen["switched"] == [language, other, other] and seen["switchedHeading"] == catalogue(other)["title"]
    assert seen["loggedOut"]

    with open_database(harness.db_path, create=False) as db:
        runs = LocalRunRepository(db).list_runs(limit=20)
        assert sorted(r.status.value for r in runs) == ["cancelled"] + ["succeeded"] * 5  # the pull is a Run
        schedules = LocalScheduleRepository(db).list()
        assert len(schedules) == 1 + 22 + 2  # the cron, the batch, the subscription's pull and its script
        schedule = next(s for s in schedules if s.name == "nightly-edited")
        assert (schedule.name, schedule.time_zone, schedule.retries, schedule.task_user, schedule.paused) == \
            ("nightly-edited", "Europe/Berlin", 1, "root", True)
        assert db.connection.execute("SELECT count(*) FROM panel_sessions").fetchone()[0] == 0  # logged out
    tag = f"{language}-{size}"
    for name in seen["screens"]:
        assert (OUTPUT / f"{tag}-{name}.png").stat().st_size > 0
    (OUTPUT / f"{tag}-figures.json").write_text(json.dumps({
        "firstLoadMs": seen["firstLoadMs"], "navigation": seen["navigation"],
        "clickRunToShownRunningMs": seen["runningMs"]}))
