// The web panel in a real browser: Debian's chromium, headless, driven by playwright-core (which
// never downloads a browser). Run by tests/e2e/test_panel_browser_e2e.py against a running serve:
//
//   node panel_flow.mjs URL PASSWORD OUTPUT_DIR [LANGUAGE]
//
// Logs in, runs a command and watches it succeed, reads its log, cancels a long run, adds a
// schedule, logs out; every control found by its accessible name, as a user of a screen reader
// would. Screenshots go to OUTPUT_DIR; one JSON line on stdout says what was seen, with the times
// from "Run" clicked to the run shown running (figures for the bench, never pass/fail here).
import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";
import { join } from "node:path";

const [url, password, outDir, language = "en-US"] = process.argv.slice(2);
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
mkdirSync(outDir, { recursive: true });
const seen = { language, runningMs: [] };
const TIMEOUT = 20000;

const browser = await chromium.launch({ executablePath, headless: true, args: ["--no-sandbox", "--disable-gpu"] });
try {
  const context = await browser.newContext({ locale: language, viewport: { width: 412, height: 915 } }); // a phone
  const page = await context.newPage();
  page.setDefaultTimeout(TIMEOUT);
  const problems = [];
  // A 401 (logged out, wrong password) is expected; Chrome logs each as a console error.
  page.on("console", (m) => { if (m.type() === "error" && !/status of 401/.test(m.text())) problems.push(m.text()); });
  page.on("pageerror", (e) => problems.push(String(e)));
  page.on("dialog", (d) => d.accept());
  const shot = async (name) => page.screenshot({ path: join(outDir, `${language}-${name}.png`), fullPage: true });

  await page.goto(url);
  await page.getByLabel("Password", { exact: true }).fill("wrong password");
  await page.getByRole("button", { name: "Log in", exact: true }).click();
  await page.getByRole("alert").filter({ hasText: /\S/ }).first().waitFor();
  seen.wrongPasswordText = await page.locator("#login-error").textContent();
  await shot("1-login-refused");
  await page.waitForTimeout(1200); // the login throttle's first wait
  await page.getByLabel("Password", { exact: true }).fill(password);
  await page.getByRole("button", { name: "Log in", exact: true }).click();
  const logout = page.getByRole("button", { name: "Log out", exact: true });
  await logout.waitFor();
  seen.heading = await page.locator("h1").textContent();

  // Nothing yet: each list says so, in one cell across every column of its header.
  seen.emptyLists = {};
  for (const list of ["runs", "schedules"]) {
    await page.locator(`#${list} tbody td`).first().waitFor();
    seen.emptyLists[list] = await page.locator(`#${list}`).evaluate((table) => ({
      text: table.tBodies[0].textContent, rows: table.tBodies[0].rows.length,
      span: table.tBodies[0].rows[0].cells[0].colSpan, columns: table.tHead.rows[0].cells.length,
    }));
  }

  // Run a command and watch it succeed; then read its log.
  const newRun = page.getByRole("form", { name: "New run" });
  for (let i = 0; i < 3; i++) {
    await newRun.getByLabel("Command", { exact: true }).fill(`echo hello-from-the-panel-${i}; sleep 0.5`);
    const clicked = Date.now();
    await newRun.getByRole("button", { name: "Run", exact: true }).click();
    await page.locator("#detail-status", { hasText: /^(running|succeeded)$/ }).waitFor();
    seen.runningMs.push(Date.now() - clicked);
    await page.locator("#detail-status", { hasText: "succeeded" }).waitFor();
  }
  await page.locator("#log", { hasText: "hello-from-the-panel-2" }).waitFor();
  seen.log = await page.locator("#log").textContent();
  await page.locator("#runs tbody tr", { hasText: "hello-from-the-panel-2" }).locator(".status-succeeded").waitFor();
  await shot("2-run-succeeded");

  // Cancel a long run.
  await newRun.getByLabel("Command", { exact: true }).fill("echo long; sleep 300");
  await newRun.getByRole("button", { name: "Run", exact: true }).click();
  await page.locator("#detail-status", { hasText: "running" }).waitFor();
  const longRow = page.locator("#runs tbody tr", { hasText: "sleep 300" });
  await longRow.getByRole("button", { name: "Cancel", exact: true }).click();
  await page.locator("#runs tbody tr", { hasText: "sleep 300" }).locator(".status-cancelled").waitFor();
  seen.cancelled = true;
  await shot("3-run-cancelled");

  // Add a schedule, pause and resume it.
  const newSchedule = page.getByRole("form", { name: "New schedule" });
  await newSchedule.getByLabel("Cron", { exact: true }).fill("30 3 * * *");
  await newSchedule.getByLabel("Command", { exact: true }).fill("echo nightly");
  await newSchedule.getByRole("button", { name: "Add schedule", exact: true }).click();
  const scheduleRow = page.locator("#schedules tbody tr", { hasText: "30 3 * * *" });
  await scheduleRow.waitFor();
  await scheduleRow.getByRole("button", { name: "Pause", exact: true }).click();
  await scheduleRow.getByRole("button", { name: "Resume", exact: true }).waitFor();
  await scheduleRow.getByRole("button", { name: "Resume", exact: true }).click();
  await scheduleRow.getByRole("button", { name: "Pause", exact: true }).waitFor();
  seen.schedule = true;
  await shot("4-schedule-added");

  await logout.click();
  await page.getByLabel("Password", { exact: true }).waitFor();
  seen.loggedOut = true;
  await shot("5-logged-out");
  seen.problems = problems;
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(seen) + "\n");
