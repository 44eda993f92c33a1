// The web panel in a real browser: Debian's chromium, headless, driven by playwright-core (which
// never downloads a browser). Run by tests/e2e/test_panel_browser_e2e.py against a running serve:
//
//   node panel_flow.mjs URL PASSWORD OUTPUT_DIR LANGUAGE WIDTHxHEIGHT MARK_FILE REPOSITORY_URL
//
// What a user does on a phone or a desktop: log in (once with a wrong password), add an env
// entry and a secret, add a cron in a zone, edit it (another zone, its user, a command that fails once, then retries),
// run it and follow its log through the retry, run a command and stop it, disable the cron, see
// its Runs, add a subscription and pull it, send a test notification, create an OpenAPI app, run the device's checks, switch the language and log out.
// Controls are found by id and data-act, never by their text (which follows the language).
// At every screen: a screenshot, whether the page scrolls sideways, the controls under 44 px
// and, in Chinese, the English words shown outside data (translate="no"). One JSON line on
// stdout says what was seen, with the figures (never pass/fail here).
import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";
import { join } from "node:path";

const [url, password, outDir, language, size, markFile, repositoryUrl] = process.argv.slice(2);
const [width, height] = size.split("x").map(Number);
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
mkdirSync(outDir, { recursive: true });
const tag = `${language}-${width}x${height}`;
const seen = { language, width, height, screens: {}, runningMs: [], problems: [] };
const TIMEOUT = 30000;
const SECRET = "s3cret-cookie-value-from-the-browser";

// In the page: what this screen shows that a test holds to the rules.
function inspect(checkEnglish) {
  const visible = (node) => {
    for (let e = node; e; e = e.parentElement) {
      if (e.hidden || getComputedStyle(e).display === "none") return false;
    }
    return true;
  };
  const words = [];
  if (checkEnglish) {
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      const host = n.parentElement;
      if (!host || host.closest("[translate=no], script, style") || !visible(host)) continue;
      for (const w of n.textContent.match(/[A-Za-z][A-Za-z'-]+/g) || []) words.push(w);
    }
    for (const e of document.querySelectorAll("input[placeholder], textarea[placeholder]")) {
      if (visible(e) && !e.closest("[translate=no]") && e.getAttribute("translate") !== "no") {
        for (const w of e.placeholder.match(/[A-Za-z][A-Za-z'-]+/g) || []) words.push(w);
      }
    }
  }
  const small = [];
  for (const e of document.querySelectorAll("button, input:not([type=checkbox]), select, textarea, label.check")) {
    if (!visible(e)) continue;
    const r = e.getBoundingClientRect();
    if (r.width && r.height < 44) small.push(`${e.tagName.toLowerCase()}#${e.id || e.getAttribute("data-act") || ""} ${Math.round(r.height)}px`);
  }
  const scroller = document.scrollingElement;
  return { words, small, scrollWidth: scroller.scrollWidth, innerWidth: window.innerWidth, lang: document.documentElement.lang };
}

// The browser's own language, as a user sets it (--lang; headless, Playwright's default
// --accept-lang would otherwise win): no locale emulated, the page reads navigator.language.
const browser = await chromium.launch({ executablePath, headless: true,
  args: ["--no-sandbox", "--disable-gpu", `--lang=${language}`, `--accept-lang=${language}`] });
try {
  const context = await browser.newContext({ viewport: { width, height }, deviceScaleFactor: 1,
    isMobile: width < 600, hasTouch: width < 600 });
  const page = await context.newPage();
  page.setDefaultTimeout(TIMEOUT);
  // A 401 (logged out, wrong password) is expected; Chrome logs each as a console error.
  page.on("console", (m) => { if (m.type() === "error" && !/status of 40[19]/.test(m.text())) seen.problems.push(m.text()); });
  page.on("pageerror", (e) => seen.problems.push(String(e)));
  page.on("dialog", (d) => d.accept());
  const screen = async (name) => {
    await page.waitForTimeout(150);  // the redraw of a list after an action
    seen.screens[name] = await page.evaluate(inspect, language.startsWith("zh"));
    await page.screenshot({ path: join(outDir, `${tag}-${name}.png`), fullPage: false });
  };
  const tab = async (name) => {
    await page.locator(`[data-tab=${name}]`).click();
    await page.locator(`#page-${name}`).waitFor();
  };

  seen.navigatorLanguage = await page.evaluate(() => navigator.language);
  const loadStarted = Date.now();
  await page.goto(url);
  await page.locator("#password").waitFor();
  seen.firstLoadMs = Date.now() - loadStarted;
  seen.navigation = await page.evaluate(() => {
    const n = performance.getEntriesByType("navigation")[0];
    return { domContentLoadedMs: Math.round(n.domContentLoadedEventEnd), loadMs: Math.round(n.loadEventEnd),
             transferred: performance.getEntriesByType("resource").reduce((s, r) => s + r.transferSize, n.transferSize) };
  });
  await page.locator("#password").fill("wrong password");
  await page.locator("#login").click();
  await page.locator("#login-error span").waitFor();
  seen.wrongPasswordText = await page.locator("#login-error span").textContent();
  await screen("1-login-refused");
  await page.waitForTimeout(1200); // the login throttle's first wait
  await page.locator("#password").fill(password);
  await page.locator("#login").click();
  await page.locator("#tabs").waitFor();
  seen.heading = await page.locator("h1").textContent();
  await page.locator("#cron-list li.empty").waitFor();
  seen.emptyCrons = await page.locator("#cron-list li.empty").textContent();
  await screen("2-crons-empty");

  // Envs: a plain entry and a secret, whose value is never sent back to the page.
  await tab("envs");
  for (const [name, value, secret] of [["PLAIN_VALUE", "plain-1", false], ["COOKIE", SECRET, true]]) {
    await page.locator("#env-new").click();
    await page.locator("#ef-name").fill(name);
    await page.locator("#ef-value").fill(value);
    if (secret) await page.locator("#ef-secret").check();
    await page.locator("#ef-save").click();
    await page.locator(`#env-list li[data-env]`, { hasText: name }).waitFor();
  }
  seen.secretShown = (await page.content()).includes(SECRET) ||
    (await page.evaluate(() => fetch("/api/envs").then((r) => r.text()))).includes(SECRET);
  await screen("3-envs");

  // A cron in a zone: its next fire shown in that zone, the zone named beside it.
  await tab("crons");
  await page.locator("#cron-new").click();
  await page.locator("#cf-cron").fill("30 7 * * *");
  await page.locator("#cf-tz").fill("Asia/Shanghai");
  await page.locator("#cf-command").fill("echo nightly");
  await page.locator("#cf-name").fill("nightly");
  await screen("4-cron-form");
  await page.locator("#cf-save").click();
  const cron = page.locator("#cron-list li[data-cron]", { hasText: "nightly" });
  await cron.waitFor();
  seen.cronCard = await cron.innerText();

  // Edit it: a command that fails once and then succeeds, one retry a second later.
  await cron.locator("[data-act=edit]").click();
  await page.locator("#cron-form:not([hidden])").waitFor();
  seen.editFormZone = await page.locator("#cf-tz").inputValue();
  await page.locator("#cf-name").fill("nightly-edited");
  await page.locator("#cf-tz").fill("Europe/Berlin");
  await page.locator("#cf-user").fill("root");
  await page.locator("#cf-notify").fill("hook:on=failed,timeout");
  await page.locator("#cf-command").fill(
    `if [ -e '${markFile}' ]; then echo second-attempt-ok; else touch '${markFile}'; echo first-attempt-fails; exit 3; fi`);
  await page.locator("#cf-retries").fill("1");
  await page.locator("#cf-delay").fill("1s");
  await page.locator("#cf-save").click();
  const edited = page.locator("#cron-list li[data-cron]", { hasText: "nightly-edited" });
  await edited.waitFor();
  seen.editedCard = await edited.innerText();
  await screen("5-cron-edited");

  // Run it and follow its log through the retry.
  await edited.locator("[data-act=run]").click();
  await page.locator("#run-detail:not([hidden])").waitFor();
  seen.detailInView = await page.locator("#run-detail").evaluate((e) => {
    const r = e.getBoundingClientRect();
    return r.top >= 0 && r.top < window.innerHeight / 2;
  });
  await page.locator("#log", { hasText: "second-attempt-ok" }).waitFor();
  await page.locator("#detail-status.s-succeeded").waitFor();
  seen.followedLog = await page.locator("#log").textContent();
  seen.attempts = await page.locator("#attempts > li").count();
  await screen("6-log-through-retry");
  // The first Attempt's own log.
  await page.locator("[data-act=log-1]").click();
  await page.waitForFunction(() => {
    const log = document.getElementById("log").textContent;
    return log.includes("first-attempt-fails") && !log.includes("second-attempt-ok");
  });
  seen.firstAttemptLog = await page.locator("#log").textContent();

  // "Run" clicked to the Run shown running (figures), then stop a long one.
  for (let i = 0; i < 3; i++) {
    await page.locator("#run-new").click();
    await page.locator("#run-command").fill(`echo hello-from-the-panel-${i}; sleep 0.5`);
    const clicked = Date.now();
    await page.locator("#run-go").click();
    await page.locator("#detail-status.s-running, #detail-status.s-succeeded").waitFor();
    seen.runningMs.push(Date.now() - clicked);
    await page.locator("#detail-status.s-succeeded").waitFor();
  }
  await page.locator("#run-new").click();
  await page.locator("#run-command").fill("echo long; sleep 300");
  await page.locator("#run-go").click();
  await page.locator("#detail-status.s-running").waitFor();
  await page.locator("#detail-cancel").click();
  await page.locator("#detail-status.s-cancelled").waitFor();
  seen.stopped = true;
  await page.locator("#run-list li.s-cancelled").waitFor();
  await screen("7-runs");
  await page.locator("#run-status").selectOption("cancelled");
  await page.waitForFunction(() => {
    const cards = [...document.querySelectorAll("#run-list li[data-run]")];
    return cards.length === 1 && cards[0].classList.contains("s-cancelled");
  });
  seen.runsFiltered = true;
  await page.locator("#run-status").selectOption("");

  // Disable the cron; its Runs.
  await tab("crons");
  await edited.locator("[data-act=disable]").click();
  await page.locator("#cron-list li.s-disabled[data-cron]").waitFor();
  seen.disabledCard = await page.locator("#cron-list li.s-disabled[data-cron]").innerText();
  await screen("8-cron-disabled");
  await page.locator("#cron-list li[data-cron] [data-act=runs]").click();
  await page.locator("#run-filter:not([hidden])").waitFor();
  await page.locator("#run-list li[data-run]").first().waitFor();
  seen.cronRuns = await page.locator("#run-list li[data-run]").count();

  // Many crons: 20 a page, a search, a status and a label filter.
  await page.evaluate(async () => {
    for (let i = 0; i < 22; i++) {
      const response = await fetch("/api/schedules", { method: "POST", headers: { "X-Edge-Panel": "1",
        "Content-Type": "application/json" }, body: JSON.stringify({ cron: `${i} 5 * * *`, command: ["true"],
        name: `batch-${i}`, labels: ["batch"] }) });
      if (response.status !== 201) throw new Error(await response.text());
    }
  });
  await tab("crons");
  await page.locator("#cron-pager:not([hidden])").waitFor();
  const cards = page.locator("#cron-list li[data-cron]");
  seen.paging = { first: await cards.count(), page: await page.locator("#cron-page").textContent() };
  await page.locator("#cron-next").click();
  await page.waitForFunction(() => document.querySelectorAll("#cron-list li[data-cron]").length === 3);
  seen.paging.second = await cards.count();
  await page.locator("#cron-search").fill("batch-17");
  await page.waitForFunction(() => document.querySelectorAll("#cron-list li[data-cron]").length === 1);
  seen.searched = await cards.first().locator(".title").textContent();
  await page.locator("#cron-search").fill("");
  await page.locator("#cron-status").selectOption("disabled");
  await page.waitForFunction(() => document.querySelectorAll("#cron-list li[data-cron]").length === 1);
  seen.disabledOnly = await cards.first().locator(".title").textContent();
  await page.locator("#cron-status").selectOption("");
  await page.locator("#cron-label").selectOption("batch");
  await page.waitForFunction(() => document.querySelectorAll("#cron-list li[data-cron]").length === 20);
  seen.labelPages = await page.locator("#cron-page").textContent();
  await page.locator("#cron-search").fill("no-such-cron");
  await page.locator("#cron-list li.empty").waitFor();
  seen.noMatch = await page.locator("#cron-list li.empty").textContent();
  await screen("12-crons-filtered");
  await page.locator("#cron-search").fill("");
  await page.locator("#cron-label").selectOption("");

  // Subscriptions (none), an app whose secret is shown once, the device's checks.
  await tab("subs");
  await page.locator("#sub-list li.empty").waitFor();
  await page.locator("#sub-new").click();
  await page.locator("#sf-url").fill(repositoryUrl);
  await page.locator("#sf-name").fill("scripts");
  await page.locator("#sf-schedule").fill("0 4 * * *");
  await page.locator("#sf-save").click();
  const sub = page.locator("#sub-list li[data-sub]");
  await sub.waitFor();
  await sub.locator("[data-act=pull]").click();
  await page.locator("#detail-status.s-succeeded").waitFor();
  await page.locator("#log", { hasText: "jd_a.js" }).waitFor();
  seen.pullLog = await page.locator("#log").textContent();
  await tab("subs");
  await sub.locator("[data-act=pause]").click();
  await sub.locator("[data-act=resume]").waitFor();
  seen.subCard = await sub.innerText();
  await screen("9-subscriptions");
  // Notifications: the channel added on the device, a test message through it.
  await tab("notify");
  const channel = page.locator("#channel-list li[data-channel=hook]");
  await channel.waitFor();
  seen.defaultRules = await page.locator("#notify-defaults").textContent();
  await channel.locator("[data-act=test]").click();
  await page.locator("#outbox-list li.s-succeeded").waitFor();
  seen.testMessage = await page.locator("#outbox-list li.s-succeeded").innerText();
  await screen("13-notifications");

  await tab("apps");
  await page.locator("#af-name").fill("phone-app");
  await page.locator("#af-create").click();
  await page.locator("#app-secret:not([hidden])").waitFor();
  seen.appSecretLength = (await page.locator("#app-new-secret").textContent()).length;
  await page.locator("#app-list li[data-app=phone-app]").waitFor();
  await screen("10-apps");
  await tab("device");
  await page.locator("#health-list dt").first().waitFor();
  await page.locator("#check-run").click();
  await page.locator("#check-list li").first().waitFor();
  seen.checkSummary = await page.locator("#check-summary").textContent();
  await screen("11-device");

  // The switch in the header: the other language at once, and still after a reload.
  const before = await page.evaluate(() => document.documentElement.lang);
  await page.locator("#lang").click();
  seen.switched = [before, await page.evaluate(() => document.documentElement.lang)];
  await page.reload();
  await page.locator("#tabs").waitFor();
  seen.switched.push(await page.evaluate(() => document.documentElement.lang));
  seen.switchedHeading = await page.locator("h1").textContent();

  await page.locator("#logout").click();
  await page.locator("#password").waitFor();
  seen.loggedOut = true;
} catch (error) {
  seen.problems.push(`flow stopped: ${error.message}`);
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(seen) + "\n");
