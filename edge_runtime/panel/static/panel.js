// The panel's page: plain JavaScript, no build step, nothing fetched but this device's own API.
// Every text it shows comes from text.js (PANEL_TEXT) in the chosen language: the browser's
// (navigator.language: Chinese for zh*, else English) until the switch in the header picks the
// other, remembered in localStorage. What the device says of itself (commands, names, logs, an
// error's code and message) is shown as it is, marked translate="no". Times and numbers go
// through Intl in that language; a cron's times are shown in its own zone, named beside them.
"use strict";

(function () {
  var LANGS = ["zh-CN", "en"];
  var LANG_KEY = "edge-panel-lang";
  // An error code with no text of its own takes the text of the first of these it contains.
  var ERROR_FAMILIES = ["NOT_FOUND", "AMBIGUOUS", "INVALID", "FAILED", "REFUSED", "CONFLICT"];
  var RUN_STATUSES = ["queued", "running", "retry_wait", "succeeded", "failed", "cancelled", "lost"];
  var ACTIVE = { created: 1, queued: 1, dispatching: 1, running: 1, waiting_approval: 1, retry_wait: 1 };
  var ACTIVE_ATTEMPT = { claimed: 1, starting: 1, running: 1 };
  var PAGE_SIZE = 20;
  var RUNS_PAGE = 50;
  var REFRESH_MS = 3000;
  var LOG_POLL_MS = 1000;
  var STARTING_POLL_MS = 200;  // until a new Run is shown running

  var $ = function (id) { return document.getElementById(id); };
  var each = function (selector, f) { Array.prototype.forEach.call(document.querySelectorAll(selector), f); };
  var lang = chooseLanguage();
  var page = "crons";
  var refreshTimer = null;
  var shown = {};        // list id -> the JSON last drawn in it (a list is redrawn only when it changed)
  var crons = [];        // GET /api/crons
  var cronPage = 0;
  var runInfo = {};      // Run id -> its detail (an ended Run's is kept: it never changes)
  var runs = [];
  var runFilter = null;  // {id, name}: only this cron's Runs
  var runStatus = "";    // only the Runs in this status
  var envs = [];
  var subs = [];
  var apps = [];
  var notify = null;     // GET /api/notify: channels, default rules, latest messages
  var health = null;
  var checkReport = null;
  var editingCron = null;  // the cron the cron form edits (null: a new one)
  var editingEnv = null;   // the env entry the env form edits (null: a new one)
  var cronInitial = {};  // what the cron form held when opened: only changed fields are sent
  var detail = noDetail(null);  // the Run whose detail is shown, and how far its log was read

  function noDetail(runId) {
    return { id: runId, run: null, follow: true, attempt: null, logAttempt: null, logDone: false, offset: 0, timer: null };
  }

  // ------------------------------------------------------------------ language

  function chooseLanguage() {
    var saved = null;
    try {
      saved = localStorage.getItem(LANG_KEY);
    } catch (blocked) {  // storage refused (a private window): the browser's language then
      saved = null;
    }
    if (LANGS.indexOf(saved) >= 0) { return saved; }
    return /^zh/i.test(navigator.language || "") ? "zh-CN" : "en";
  }

  function text(key) {
    var entry = PANEL_TEXT[key];
    return entry ? entry[LANGS.indexOf(lang)] : key;
  }

  function t(key, vars) {
    return text(key).replace(/\{(\w+)\}/g, function (_, name) { return vars && vars[name] !== undefined ? vars[name] : ""; });
  }

  // The text of ``key`` with each {name} the value given: a node as it is, else data (translate="no").
  function rich(key, vars) {
    var fragment = document.createDocumentFragment();
    text(key).split(/\{(\w+)\}/).forEach(function (part, i) {
      if (i % 2) {
        var value = vars[part];
        fragment.appendChild(value instanceof Node ? value : raw("span", value));
      } else if (part) {
        fragment.appendChild(document.createTextNode(part));
      }
    });
    return fragment;
  }

  function applyLanguage() {
    document.documentElement.lang = lang;
    document.title = t("title");
    each("[data-i18n]", function (n) { n.textContent = t(n.getAttribute("data-i18n")); });
    each("[data-i18n-ph]", function (n) { n.placeholder = t(n.getAttribute("data-i18n-ph")); });
    $("lang").lang = lang === "en" ? "zh-CN" : "en";
    var select = $("run-status");
    while (select.options.length > 1) { select.remove(1); }
    RUN_STATUSES.forEach(function (s) { select.add(new Option(t("rs." + s), s)); });
    select.value = runStatus;
    shown = {};
    drawAll();
  }

  var numbers = function () { return new Intl.NumberFormat(lang); };
  function num(n) { return numbers().format(n); }

  function when(ms) {
    if (!ms) { return ""; }
    return new Intl.DateTimeFormat(lang, { year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit",
      minute: "2-digit", second: "2-digit" }).format(new Date(ms));
  }

  // ``ms`` as the wall clock of a zone ``offsetS`` seconds east of UTC (the server says the offset:
  // a zone may be a POSIX TZ text, which Intl does not know).
  function whenIn(ms, offsetS) {
    return new Intl.DateTimeFormat(lang, { timeZone: "UTC", year: "numeric", month: "2-digit", day: "2-digit",
      hour: "2-digit", minute: "2-digit" }).format(new Date(ms + offsetS * 1000));
  }

  function duration(ms) {
    if (ms === undefined || ms === null || ms < 0) { return ""; }
    if (ms < 1000) { return t("u.ms", { n: num(ms) }); }
    var s = Math.round(ms / 1000);
    if (s < 60) { return t("u.s", { n: num(s) }); }
    var m = Math.floor(s / 60);
    return m < 60 ? t("u.m", { m: num(m), s: num(s % 60) }) : t("u.h", { h: num(Math.floor(m / 60)), m: num(m % 60) });
  }

  function bytes(n) {
    var format = new Intl.NumberFormat(lang, { maximumFractionDigits: 1 });
    if (n < 1024) { return format.format(n) + " B"; }
    if (n < 1048576) { return format.format(n / 1024) + " KiB"; }
    return format.format(n / 1048576) + " MiB";
  }

  // ------------------------------------------------------------------ API and errors

  function api(method, path, body) {
    var options = { method: method, credentials: "same-origin", headers: {} };
    if (method !== "GET") { options.headers["X-Edge-Panel"] = "1"; }
    if (body !== undefined) {
      options.headers["Content-Type"] = "application/json";
      options.body = JSON.stringify(body);
    }
    return fetch(path, options).then(function (response) {
      // A refusal before any handler (408, 413) may have no JSON body: its status says it all.
      return response.json().catch(function () { return {}; }).then(function (value) {
        if (response.status === 401 && path !== "/api/login") { showLogin(); }
        if (!response.ok) {
          throw failure((value.error && value.error.code) || "HTTP_" + response.status,
                        value.error ? value.error.message : response.statusText);
        }
        return value;
      });
    }, function (error) { throw failure("NETWORK", String(error)); });
  }

  function failure(code, detail) {
    var error = new Error(detail);
    error.code = code;
    error.detail = detail;
    return error;
  }

  function errorText(code) {
    if (PANEL_TEXT["e." + code]) { return t("e." + code); }
    for (var i = 0; i < ERROR_FAMILIES.length; i++) {
      if (code.indexOf(ERROR_FAMILIES[i]) >= 0) { return t("ef." + ERROR_FAMILIES[i]); }
    }
    return t("ef.OTHER");
  }

  // An error where its action is: the text of its code, then the code and the device's message.
  function showError(id, error) {
    var box = $(id);
    box.textContent = "";
    if (!error) { return; }
    box.appendChild(element("span", errorText(error.code)));
    box.appendChild(raw("code", error.code + (error.detail && error.detail !== error.code ? ": " + error.detail : "")));
  }

  function reporting(id, promise) {
    showError(id, null);
    return promise.then(function (value) { refresh(); return value; }, function (error) { showError(id, error); });
  }

  // ------------------------------------------------------------------ building blocks

  function element(tag, content, className) {
    var node = document.createElement(tag);
    if (content !== undefined && content !== null) { node.textContent = String(content); }
    if (className) { node.className = className; }
    return node;
  }

  // Data the device holds (a command, a name, a log): shown as it is, never translated.
  function raw(tag, content, className) {
    var node = element(tag, content, className);
    node.setAttribute("translate", "no");
    return node;
  }

  function button(key, act, onClick, className) {
    var node = element("button", t(key), className || "secondary");
    node.type = "button";
    node.setAttribute("data-act", act);
    node.addEventListener("click", onClick);
    return node;
  }

  function line(className) {
    var node = element("p", null, className || "meta");
    for (var i = 1; i < arguments.length; i++) {
      var part = arguments[i];
      if (part !== null && part !== undefined && part !== "") {
        node.appendChild(part instanceof Node ? part : document.createTextNode(part));
      }
    }
    return node;
  }

  function status(value) { return element("span", t("rs." + value), "status s-" + value); }

  function commandText(command) {
    if (!command) { return ""; }
    if (command.length === 3 && command[0] === "sh" && command[1] === "-c") { return command[2]; }
    return command.map(function (a) { return /^[\w@%+=:,./-]+$/.test(a) ? a : "'" + a.replace(/'/g, "'\\''") + "'"; }).join(" ");
  }

  // Redraw list ``id`` from ``items`` only when they changed (a tap is never lost to a redraw).
  function draw(id, items, emptyKey, card, extra) {
    var key = lang + JSON.stringify(items) + (extra || "");
    if (shown[id] === key) { return; }
    shown[id] = key;
    var list = $(id);
    list.textContent = "";
    if (!items.length) { list.appendChild(element("li", t(emptyKey), "empty")); }
    items.forEach(function (item) { list.appendChild(card(item)); });
  }

  function openForm(id, titleKey) {
    var form = $(id);
    form.hidden = false;
    if (titleKey) { $(id + "-title").textContent = t(titleKey); }
    form.scrollIntoView({ block: "start" });
    var first = form.querySelector("input:not([disabled]), textarea");
    if (first) { first.focus({ preventScroll: true }); }
  }

  // ------------------------------------------------------------------ views and refresh

  function showLogin() {
    stopTimers();
    $("tabs").hidden = true;
    each(".page", function (p) { p.hidden = true; });
    $("logout").hidden = true;
    $("login-view").hidden = false;
    $("password").focus();
  }

  function showApp() {
    $("login-view").hidden = true;
    $("tabs").hidden = false;
    $("logout").hidden = false;
    showPage(pageOfHash());
  }

  function pageOfHash() {
    var name = location.hash.replace("#", "");
    return $("page-" + name) ? name : "crons";
  }

  function showPage(name) {
    page = name;
    each("[data-tab]", function (b) { b.setAttribute("aria-current", b.getAttribute("data-tab") === name ? "page" : "false"); });
    each(".page", function (p) { p.hidden = p.id !== "page-" + name; });
    if (location.hash !== "#" + name) { history.replaceState(null, "", "#" + name); }
    refresh();
  }

  function stopTimers() {
    if (refreshTimer) { clearTimeout(refreshTimer); refreshTimer = null; }
    stopDetail();
  }

  var LOADERS = {
    crons: function () { return loadCrons(); },
    runs: function () { return loadRuns(); },
    envs: function () { return api("GET", "/api/envs").then(function (v) { envs = v; drawEnvs(); }); },
    subs: function () { return api("GET", "/api/subscriptions").then(function (v) { subs = v; drawSubs(); }); },
    apps: function () { return api("GET", "/api/apps").then(function (v) { apps = v; drawApps(); }); },
    notify: function () { return api("GET", "/api/notify").then(function (v) { notify = v; drawNotify(); }); },
    device: function () { return api("GET", "/api/health").then(function (v) { health = v; drawHealth(); }); }
  };

  function refresh() {
    if (refreshTimer) { clearTimeout(refreshTimer); refreshTimer = null; }
    var current = page;
    LOADERS[current]().then(function () { showError(current + "-error", null); },
                            function (error) { showError(current + "-error", error); })
      .then(function () {
        // A page nobody looks at (a phone in a pocket) asks nothing of the router until shown again.
        if (!$("tabs").hidden && !refreshTimer && !document.hidden) { refreshTimer = setTimeout(refresh, REFRESH_MS); }
      });
  }

  function drawAll() {
    drawCrons();
    drawRuns();
    drawEnvs();
    drawSubs();
    drawApps();
    drawNotify();
    drawHealth();
    if (detail.run) { drawDetail(detail.run); }
  }

  // ------------------------------------------------------------------ crons

  function lastRunOf(view) { return view.schedule.lastRunId ? runInfo[view.schedule.lastRunId] : null; }

  function cronState(view) {
    var last = lastRunOf(view);
    if (last && ACTIVE[last.status]) { return "running"; }
    return view.schedule.paused ? "disabled" : "enabled";
  }

  function filteredCrons() {
    var query = $("cron-search").value.trim().toLowerCase();
    var state = $("cron-status").value;
    var label = $("cron-label").value;
    return crons.filter(function (view) {
      var s = view.schedule;
      var haystack = [s.name || "", commandText(s.command), s.expression, (s.labels || []).join(" ")].join("\n").toLowerCase();
      return (!query || haystack.indexOf(query) >= 0) && (!state || cronState(view) === state) &&
        (!label || (s.labels || []).indexOf(label) >= 0);
    });
  }

  function cronsOnPage() { return filteredCrons().slice(cronPage * PAGE_SIZE, (cronPage + 1) * PAGE_SIZE); }

  function loadCrons() {
    return api("GET", "/api/crons").then(function (views) {
      crons = views;
      // The last Run of each cron on the page, unless it ended already (then it is known for good).
      var wanted = cronsOnPage().map(function (v) { return v.schedule.lastRunId; }).filter(function (id) {
        return id && !(runInfo[id] && !ACTIVE[runInfo[id].status]);
      });
      return Promise.all(wanted.map(function (id) {
        return api("GET", "/api/runs/" + id).then(function (run) { runInfo[id] = run; }, function (error) {
          // Retention removed it: the cron says no last Run rather than failing the page.
          if (error.code !== "RUN_NOT_FOUND") { throw error; }
        });
      }));
    }).then(drawCrons);
  }

  function drawCrons() {
    var labels = {};
    crons.forEach(function (v) { (v.schedule.labels || []).forEach(function (l) { labels[l] = 1; }); });
    var select = $("cron-label");
    var chosen = select.value;
    var names = Object.keys(labels).sort();
    if (select.options.length - 1 !== names.length || names.some(function (n, i) { return select.options[i + 1].value !== n; })) {
      while (select.options.length > 1) { select.remove(1); }
      names.forEach(function (n) { var o = new Option(n, n); o.setAttribute("translate", "no"); select.add(o); });
      select.value = labels[chosen] ? chosen : "";
    }
    var matching = filteredCrons();
    var pages = Math.max(1, Math.ceil(matching.length / PAGE_SIZE));
    cronPage = Math.min(cronPage, pages - 1);
    var onPage = matching.slice(cronPage * PAGE_SIZE, (cronPage + 1) * PAGE_SIZE);
    var lasts = onPage.map(function (v) { var r = lastRunOf(v); return r ? [r.status, r.attempts.length] : null; });
    draw("cron-list", onPage, crons.length ? "noMatch" : "noCrons", cronCard, JSON.stringify(lasts));
    $("cron-pager").hidden = pages < 2;
    $("cron-page").textContent = t("page", { n: num(cronPage + 1), of: num(pages) });
    $("cron-prev").disabled = cronPage === 0;
    $("cron-next").disabled = cronPage >= pages - 1;
  }

  function cronCard(view) {
    var s = view.schedule;
    var state = cronState(view);
    var last = lastRunOf(view);
    var card = element("li", null, "s-" + state);
    card.setAttribute("data-cron", s.id);
    var head = card.appendChild(element("div", null, "card-head"));
    head.appendChild(raw("span", s.name || commandText(s.command), "title"));
    head.appendChild(element("span", t("cs." + state), "status s-" + state));
    card.appendChild(line("meta", raw("code", s.expression)));
    if (s.name) { card.appendChild(raw("p", commandText(s.command), "command")); }
    var zone = raw("span", " (" + view.zone + ")", "zone");
    card.appendChild(line("meta", element("b", t("next")), " ",
      s.paused ? t("paused") : whenIn(s.nextFireAtMs, view.nextOffsetS), s.paused ? "" : zone));
    if (s.pauseReason) { card.appendChild(line("meta", t("pausedWhy"), raw("span", s.pauseReason))); }
    var lastLine = line("meta", element("b", t("last")), " ", s.lastFireAtMs ?
      whenIn(s.lastFireAtMs, view.lastOffsetS) : t("never"), s.lastFireAtMs ? zone.cloneNode(true) : "");
    if (last) {
      var attempt = last.attempts[last.attempts.length - 1];
      lastLine.appendChild(document.createTextNode(" · "));
      lastLine.appendChild(status(last.status));
      if (last.finishedAtMs) {  // the whole Run, its retries included
        lastLine.appendChild(document.createTextNode(" · " + t("took") + " " + duration(last.finishedAtMs - last.createdAtMs)));
      }
      if (attempt && attempt.exitCode !== undefined) {
        lastLine.appendChild(document.createTextNode(" · " + t("exit") + " " + attempt.exitCode));
      }
    }
    card.appendChild(lastLine);
    if (s.taskUser) { card.appendChild(line("meta", element("b", t("runsAs")), " ", raw("span", s.taskUser))); }
    if (view.notify && view.notify.length) {
      card.appendChild(line("meta", element("b", t("notifyRules")), " ", raw("span", view.notify.join(" "))));
    }
    if (s.labels && s.labels.length) { card.appendChild(line("meta", raw("span", s.labels.join(" · ")))); }
    var actions = card.appendChild(element("div", null, "actions"));
    var post = function (path) {
      return function () { reporting("crons-error", api("POST", "/api/schedules/" + s.id + "/" + path, {})); };
    };
    actions.appendChild(button("runNow", "run", function () {
      reporting("crons-error", api("POST", "/api/schedules/" + s.id + "/run", {}).then(function (outcome) {
        if (outcome.runId) { openRun(outcome.runId); }
      }));
    }, ""));
    if (state === "running") {
      actions.appendChild(button("stop", "stop", function () {
        reporting("crons-error", api("POST", "/api/runs/" + s.lastRunId + "/cancel", {}));
      }, "danger"));
    }
    actions.appendChild(s.paused ? button("enable", "enable", post("resume")) : button("disable", "disable", post("pause")));
    actions.appendChild(button("edit", "edit", function () { editCron(view); }));
    actions.appendChild(button("runsOf", "runs", function () {
      runFilter = { id: s.id, name: s.name || commandText(s.command) };
      runs = [];
      showPage("runs");
    }));
    if (s.lastRunId) { actions.appendChild(button("log", "log", function () { openRun(s.lastRunId); })); }
    actions.appendChild(button("remove", "remove", function () {
      if (!confirm(t("confirmRemoveCron"))) { return; }
      reporting("crons-error", api("DELETE", "/api/schedules/" + s.id));
    }, "danger"));
    return card;
  }

  var CRON_FIELDS = ["cron", "tz", "command", "name", "timeout", "overlap", "retries", "delay", "env", "cwd", "user",
    "notify", "labels"];

  function fillCronForm(values) {
    CRON_FIELDS.forEach(function (f) { $("cf-" + f).value = values[f] === undefined ? "" : values[f]; });
    cronInitial = values;
    showError("cron-form-error", null);
  }

  function newCron() {
    editingCron = null;
    fillCronForm({ overlap: "skip" });
    openForm("cron-form", "newCron");
  }

  function editCron(view) {
    var s = view.schedule;
    editingCron = s.id;
    var env = s.env ? Object.keys(s.env).map(function (k) { return k + "=" + s.env[k]; }).join("\n") : "";
    fillCronForm({ cron: s.expression, tz: view.zone, command: commandText(s.command), name: s.name || "",
      timeout: s.timeoutMs ? s.timeoutMs / 1000 + "s" : "", overlap: s.overlap, retries: s.retries === undefined ? "" : String(s.retries),
      delay: s.retryDelayMs ? s.retryDelayMs / 1000 + "s" : "", env: env, cwd: s.cwd || "", user: s.taskUser || "", notify: (view.notify || []).join(" "),
      labels: (s.labels || []).join(" ") });
    openForm("cron-form", "editCron");
  }

  // The cron form's body: for a new cron every field given; for an edit only the fields changed
  // (a shown value may be masked, ***: sent back unchanged it would replace the real one).
  function cronBody() {
    var value = function (f) { return $("cf-" + f).value.trim(); };
    var changed = function (f) { return editingCron === null || value(f) !== String(cronInitial[f] || "").trim(); };
    var body = {};
    if (changed("cron")) { body.cron = value("cron"); }
    if (changed("tz") && value("tz")) { body.tz = value("tz"); }
    if (changed("command")) { body.command = ["sh", "-c", $("cf-command").value]; }
    if (changed("name") && value("name")) { body.name = value("name"); }
    if (changed("timeout") && value("timeout")) { body.timeout = value("timeout"); }
    if (changed("overlap")) { body.overlap = value("overlap"); }
    if ((changed("retries") || changed("delay")) && value("retries")) { body.retries = Number(value("retries")); }
    if ((changed("retries") || changed("delay")) && value("delay") && value("retries")) { body.retryDelay = value("delay"); }
    if (changed("cwd") && value("cwd")) { body.cwd = value("cwd"); }
    if (changed("user") && value("user")) { body.user = value("user"); }
    if (changed("labels")) { body.labels = value("labels").split(/[\s,，]+/).filter(Boolean); }
    if (changed("notify")) { body.notify = value("notify").split(/\s+/).filter(Boolean); }
    if (changed("env")) {
      body.env = {};
      value("env").split("\n").forEach(function (row) {
        var at = row.indexOf("=");
        if (!row.trim()) { return; }
        if (at < 1) { throw failure("INVALID_VARIABLE", row); }
        body.env[row.slice(0, at).trim()] = row.slice(at + 1);
      });
    }
    if (editingCron === null) {
      if (body.env && !Object.keys(body.env).length) { delete body.env; }
      if (body.labels && !body.labels.length) { delete body.labels; }
      if (body.notify && !body.notify.length) { delete body.notify; }
    }
    return body;
  }

  // ------------------------------------------------------------------ runs

  function loadRuns() {
    var query = "/api/runs?limit=" + Math.min(10000, Math.max(RUNS_PAGE, runs.length)) +
      (runStatus ? "&status=" + runStatus : "") + (runFilter ? "&schedule=" + runFilter.id : "");
    return api("GET", query).then(function (list) { runs = list; drawRuns(); });
  }

  function moreRuns() {
    if (!runs.length) { return; }
    var query = "/api/runs?limit=" + RUNS_PAGE + "&before=" + runs[runs.length - 1].createdAtMs +
      (runStatus ? "&status=" + runStatus : "") + (runFilter ? "&schedule=" + runFilter.id : "");
    reporting("runs-error", api("GET", query).then(function (list) { runs = runs.concat(list); drawRuns(); }));
  }

  function drawRuns() {
    $("run-filter").hidden = !runFilter;
    $("run-filter-name").textContent = runFilter ? runFilter.name : "";
    var zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
    var exits = runs.map(function (r) { return runInfo[r.id] ? 1 : 0; });
    draw("run-list", runs, "noRuns", runCard, (detail.id || "") + exits.join(""));
    $("runs-zone").textContent = "";
    $("runs-zone").appendChild(rich("timesIn", { zone: zone }));
    $("run-more").hidden = runs.length < RUNS_PAGE;
    runs.forEach(function (r) {  // an ended Run's exit code, fetched once
      if (!ACTIVE[r.status] && !runInfo[r.id]) {
        runInfo[r.id] = { status: r.status, attempts: [] };
        api("GET", "/api/runs/" + r.id).then(function (d) { runInfo[r.id] = d; drawRuns(); }, function () {
          delete runInfo[r.id];  // asked again at the next refresh
        });
      }
    });
  }

  function runCard(run) {
    var card = element("li", null, "s-" + run.status + (run.id === detail.id ? " selected" : ""));
    card.setAttribute("data-run", run.id);
    var head = card.appendChild(element("div", null, "card-head"));
    head.appendChild(element("span", when(run.createdAtMs), "title"));
    head.appendChild(status(run.status));
    if (run.name) { card.appendChild(raw("p", run.name, "meta")); }
    card.appendChild(raw("p", commandText(run.command), "command"));
    var known = runInfo[run.id];
    var attempt = known && known.attempts.length ? known.attempts[known.attempts.length - 1] : null;
    var facts = [];
    if (run.finishedAtMs) { facts.push(t("took") + " " + duration(run.finishedAtMs - run.createdAtMs)); }
    if (attempt && attempt.exitCode !== undefined) { facts.push(t("exit") + " " + attempt.exitCode); }
    if (facts.length) { card.appendChild(line("meta", facts.join(" · "))); }
    var actions = card.appendChild(element("div", null, "actions"));
    actions.appendChild(button("details", "details", function () { openRun(run.id); }));
    if (ACTIVE[run.status]) {
      actions.appendChild(button("stop", "stop", function () { cancelRun(run.id, "runs-error"); }, "danger"));
    }
    return card;
  }

  function cancelRun(runId, errorId) {
    reporting(errorId, api("POST", "/api/runs/" + runId + "/cancel", {}).then(function () { pollDetail(); }));
  }

  // The detail of a Run, at the top of the Runs page, scrolled to: where the eye is after a tap.
  function openRun(runId) {
    stopDetail();
    detail = noDetail(runId);
    $("follow").checked = true;
    $("log").textContent = "";
    $("log-title").textContent = t("log");
    $("attempts").textContent = "";
    $("detail-id").textContent = runId.slice(-8);
    $("detail-status").textContent = "";
    $("detail-status").className = "status";
    $("detail-command").textContent = "";
    showError("detail-error", null);
    $("run-detail").hidden = false;
    if (page !== "runs") { showPage("runs"); } else { shown["run-list"] = null; drawRuns(); }
    $("run-detail").scrollIntoView({ block: "start" });
    $("run-detail").focus({ preventScroll: true });
    pollDetail();
  }

  function stopDetail() {
    if (detail.timer) { clearTimeout(detail.timer); detail.timer = null; }
  }

  function drawDetail(run) {
    $("detail-status").textContent = t("rs." + run.status);
    $("detail-status").className = "status s-" + run.status;
    $("detail-command").textContent = commandText(run.command);
    $("detail-cancel").hidden = !ACTIVE[run.status];
    var list = $("attempts");
    list.textContent = "";
    run.attempts.forEach(function (a) {
      var row = list.appendChild(element("li"));
      row.appendChild(element("b", t("attemptN", { n: num(a.attempt) })));
      row.appendChild(status(a.status));
      if (a.startedAtMs) { row.appendChild(element("span", when(a.startedAtMs), "meta")); }
      if (a.finishedAtMs && a.startedAtMs) { row.appendChild(element("span", duration(a.finishedAtMs - a.startedAtMs), "meta")); }
      if (a.exitCode !== undefined) { row.appendChild(element("span", t("exit") + " " + a.exitCode, "meta")); }
      if (a.endReason) { row.appendChild(line("meta", t("reason") + ": ", raw("span", a.endReason))); }
      var view = button("log", "log-" + a.attempt, function () {
        detail.follow = false;
        $("follow").checked = false;
        detail.attempt = a.attempt;
        pollDetail();
      });
      if (a.attempt === detail.logAttempt) { view.setAttribute("aria-pressed", "true"); }
      row.appendChild(view);
    });
    // Following, the log holds every Attempt read since the tail began, each under its mark.
    $("log-title").textContent = detail.follow || !detail.logAttempt ? t("log") : t("logOf", { n: num(detail.logAttempt) });
    $("log").setAttribute("data-empty", t("noLog"));
  }

  // The Attempt whose log to read now. Following: the latest when the tail starts; then each
  // Attempt's log is read to its end before the next one's goes on below it (a retry that came
  // between two reads still shows the log of the Attempt before it).
  function attemptToRead(latest) {
    if (!detail.follow) { return detail.attempt; }
    if (detail.logAttempt === null) { return latest; }
    return detail.logDone && detail.logAttempt < latest ? detail.logAttempt + 1 : detail.logAttempt;
  }

  function pollDetail() {
    stopDetail();
    var runId = detail.id;
    if (!runId) { return; }
    api("GET", "/api/runs/" + runId).then(function (run) {
      if (runId !== detail.id) { return null; }
      detail.run = run;
      if (!ACTIVE[run.status]) { runInfo[run.id] = run; }
      var latest = run.attempts.length ? run.attempts[run.attempts.length - 1].attempt : null;
      var wanted = attemptToRead(latest);
      // Until it runs, asked again soon: the figure a user waits on is "Run" tapped to running.
      var starting = ACTIVE[run.status] && run.status !== "running" && run.status !== "retry_wait";
      var after = function (attemptDone) {
        var behind = detail.follow && wanted < latest;  // a newer Attempt's log is waiting
        var finished = detail.follow ? !ACTIVE[run.status] && !behind : true;
        return { done: attemptDone && finished, soon: starting || (attemptDone && behind) };
      };
      if (wanted === null) { drawDetail(run); return { done: !ACTIVE[run.status], soon: starting }; }
      var log = $("log");
      if (wanted !== detail.logAttempt) {
        // Following, the next Attempt's log goes on below the last one's, under its own mark.
        if (detail.follow && detail.logAttempt !== null) {
          log.textContent += "\n" + t("retryMark", { n: num(wanted) }) + "\n";
        } else {
          log.textContent = "";
        }
        detail.logAttempt = wanted;
        detail.logDone = false;
        detail.offset = 0;
      }
      drawDetail(run);
      return api("GET", "/api/runs/" + runId + "/log?attempt=" + wanted + "&offset=" + detail.offset).then(function (chunk) {
        if (runId !== detail.id || wanted !== detail.logAttempt) { return { done: false, soon: true }; }
        if (chunk.text) {
          var atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
          log.textContent += chunk.text;
          if (atEnd) { log.scrollTop = log.scrollHeight; }
        }
        detail.offset = chunk.nextOffset;
        detail.logDone = chunk.done;
        return after(chunk.done);
      }, function (error) {
        // An Attempt that ended before its command started has no log: it is done all the same.
        if (error.code !== "COMMAND_NOT_STARTED") { showError("detail-error", error); }
        var ended = run.attempts.some(function (a) { return a.attempt === wanted && !(a.status in ACTIVE_ATTEMPT); });
        detail.logDone = ended;
        return after(ended);
      });
    }).then(function (state) {
      if (state && !state.done && runId === detail.id) {
        detail.timer = setTimeout(pollDetail, state.soon ? STARTING_POLL_MS : LOG_POLL_MS);
      }
    }, function (error) { showError("detail-error", error); });
  }

  // ------------------------------------------------------------------ env entries

  function drawEnvs() { draw("env-list", envs, "noEnvs", envCard); }

  function envCard(entry, index) {
    var card = element("li", null, entry.enabled ? "" : "s-disabled");
    card.setAttribute("data-env", entry.id);
    var head = card.appendChild(element("div", null, "card-head"));
    head.appendChild(raw("span", entry.name, "title"));
    if (entry.pinned) { head.appendChild(element("span", t("pinned"), "status")); }
    head.appendChild(element("span", t(entry.enabled ? "cs.enabled" : "cs.disabled"), "status s-" + (entry.enabled ? "enabled" : "disabled")));
    card.appendChild(entry.secret ? line("meta", t("secretHidden")) : raw("p", entry.value, "command"));
    if (entry.remarks) { card.appendChild(raw("p", entry.remarks, "meta")); }
    var actions = card.appendChild(element("div", null, "actions"));
    var post = function (path, body) {
      return function () { reporting("envs-error", api("POST", "/api/envs/" + entry.id + "/" + path, body || {})); };
    };
    actions.appendChild(button("edit", "edit", function () { editEnv(entry); }));
    actions.appendChild(entry.enabled ? button("disable", "disable", post("disable")) : button("enable", "enable", post("enable")));
    actions.appendChild(entry.pinned ? button("unpin", "unpin", post("unpin")) : button("pin", "pin", post("pin")));
    var at = envs.indexOf(entry);
    if (at > 0) { actions.appendChild(button("up", "up", post("move", { before: envs[at - 1].id }))); }
    if (at >= 0 && at < envs.length - 1) {
      actions.appendChild(button("down", "down", function () {
        reporting("envs-error", api("POST", "/api/envs/" + envs[at + 1].id + "/move", { before: entry.id }));
      }));
    }
    actions.appendChild(button("remove", "remove", function () {
      if (!confirm(t("confirmRemoveEnv"))) { return; }
      reporting("envs-error", api("DELETE", "/api/envs/" + entry.id));
    }, "danger"));
    return card;
  }

  function editEnv(entry) {
    editingEnv = entry ? entry.id : null;
    $("ef-name").value = entry ? entry.name : "";
    $("ef-value").value = entry && !entry.secret ? entry.value : "";
    $("ef-value").placeholder = entry && entry.secret ? t("ph.keepSecret") : "";
    $("ef-value").required = !entry;
    $("ef-secret").checked = !!(entry && entry.secret);
    $("ef-remarks").value = entry ? entry.remarks : "";
    showError("env-form-error", null);
    openForm("env-form", entry ? "editEnv" : "newEnv");
  }

  // ------------------------------------------------------------------ subscriptions

  function drawSubs() { draw("sub-list", subs, "noSubs", subCard); }

  function subCard(view) {
    var s = view.subscription;
    var schedule = view.pullSchedule;
    var state = schedule && !schedule.paused ? "enabled" : "disabled";
    var card = element("li", null, "s-" + state);
    card.setAttribute("data-sub", s.id);
    var head = card.appendChild(element("div", null, "card-head"));
    head.appendChild(raw("span", s.name, "title"));
    head.appendChild(element("span", t("cs." + state), "status s-" + state));
    card.appendChild(raw("p", s.url + (s.branch ? " #" + s.branch : ""), "command"));
    card.appendChild(line("meta", element("b", t("pulledBy")), " ", schedule ? raw("code", schedule.expression) : t("noPullSchedule")));
    card.appendChild(line("meta", s.revision ? t("pulledAt") + " " + when(s.pulledAtMs) + " " : t("neverPulled"),
      s.revision ? raw("code", s.revision.slice(0, 12)) : ""));
    card.appendChild(line("meta", t("counts", { scripts: num(view.scripts), schedules: num(view.schedules) })));
    var actions = card.appendChild(element("div", null, "actions"));
    actions.appendChild(button("pull", "pull", function () {
      reporting("subs-error", api("POST", "/api/subscriptions/" + s.id + "/run", {}).then(function (pulled) {
        if (pulled.runId) { openRun(pulled.runId); } else { $("subs-error").textContent = t("pullWaiting"); }
      }));
    }, ""));
    if (schedule) {
      var path = schedule.paused ? "resume" : "pause";
      actions.appendChild(button(path, path, function () {
        reporting("subs-error", api("POST", "/api/subscriptions/" + s.id + "/" + path, {}));
      }));
    }
    actions.appendChild(button("remove", "remove", function () {
      if (!confirm(t("confirmRemoveSub"))) { return; }
      reporting("subs-error", api("DELETE", "/api/subscriptions/" + s.id));
    }, "danger"));
    return card;
  }

  // ------------------------------------------------------------------ OpenAPI apps

  function drawApps() { draw("app-list", apps, "noApps", appCard); }

  function appCard(app) {
    var card = element("li");
    card.setAttribute("data-app", app.name);
    card.appendChild(element("div", null, "card-head")).appendChild(raw("span", app.name, "title"));
    card.appendChild(line("meta", element("b", t("clientId")), " ", raw("code", app.client_id)));
    card.appendChild(line("meta", app.scopes.map(function (s) { return t("sc." + s); }).join(" · ")));
    card.appendChild(line("meta", t("tokenTtl") + " " + duration(app.token_ttl_ms) + " · " +
      t("liveTokens", { n: num(app.live_tokens) }) + " · " + t("added") + " " + when(app.created_at_ms)));
    card.appendChild(element("div", null, "actions")).appendChild(button("remove", "remove", function () {
      if (!confirm(t("confirmRemoveApp"))) { return; }
      reporting("apps-error", api("POST", "/api/apps/remove", { name: app.name }));
    }, "danger"));
    return card;
  }

  // ------------------------------------------------------------------ notifications

  function drawNotify() {
    var defaults = $("notify-defaults");
    defaults.textContent = "";
    if (!notify) { return; }
    defaults.appendChild(document.createTextNode(t("defaultRules")));
    defaults.appendChild(notify.defaultRules.length ? raw("code", notify.defaultRules.join(" ")) :
      document.createTextNode(t("noRules")));
    draw("channel-list", notify.channels, "noChannels", channelCard);
    draw("outbox-list", notify.outbox, "noMessages", messageCard);
  }

  function channelCard(channel) {
    var card = element("li");
    card.setAttribute("data-channel", channel.name);
    var head = card.appendChild(element("div", null, "card-head"));
    head.appendChild(raw("span", channel.name, "title"));
    head.appendChild(raw("span", channel.kind, "status"));
    if (channel.secretParams && channel.secretParams.length) {  // by name only: their values never come here
      card.appendChild(line("meta", t("secretParams") + " ", raw("span", channel.secretParams.join(", "))));
    }
    card.appendChild(element("div", null, "actions")).appendChild(button("sendTest", "test", function () {
      reporting("notify-error", api("POST", "/api/notify/test", { channel: channel.name }).then(function () {
        $("notify-note").textContent = t("testQueued");
      }));
    }, ""));
    return card;
  }

  function messageCard(message) {
    var state = { sent: "succeeded", given_up: "failed", sending: "running", pending: "queued" }[message.status];
    var card = element("li", null, "s-" + state);
    card.setAttribute("data-message", message.id);
    var head = card.appendChild(element("div", null, "card-head"));
    head.appendChild(element("span", when(message.createdAtMs), "title"));
    head.appendChild(element("span", t("os." + message.status), "status s-" + state));
    card.appendChild(line("meta", raw("span", message.channel), " · ", raw("span", message.title || ""),
      " · ", t("tries", { n: num(message.tries) })));
    if (message.lastError) { card.appendChild(raw("p", message.lastError, "detail")); }
    return card;
  }

  // ------------------------------------------------------------------ the device

  function drawHealth() {
    var list = $("health-list");
    list.textContent = "";
    if (health) {
      var h = health;
      [["worker", raw("span", h.workerId)], ["session", t(h.sessionLive ? "live" : "gone")],
       ["slots", num(h.slotsInUse) + " / " + num(h.slots)],
       ["clock", when(h.nowMs) + (h.clockJumps ? t("jumps", { n: num(h.clockJumps) }) : "")],
       ["database", bytes(h.databaseBytes) + " + " + t("wal") + " " + bytes(h.walBytes)],
       ["logs", bytes(h.logBytes) + " / " + bytes(h.logTotalMaxBytes)],
       ["retention", t("retentionText", { runs: num(h.retainRuns), days: num(h.retainDays) })]
      ].forEach(function (row) {
        list.appendChild(element("dt", t(row[0])));
        list.appendChild(element("dd")).appendChild(row[1] instanceof Node ? row[1] : document.createTextNode(row[1]));
      });
    }
    var checks = $("check-list");
    checks.textContent = "";
    $("check-summary").textContent = checkReport ? t(checkReport.ok ? "ready" : "notReady") : "";
    $("check-summary").className = checkReport ? (checkReport.ok ? "ok" : "bad") : "";
    (checkReport ? checkReport.checks : []).forEach(function (c) {
      var row = checks.appendChild(element("li"));
      // A check this page has no text for (a newer device's) is named as the device names it.
      row.appendChild(PANEL_TEXT["chk." + c.name] ? element("b", t("chk." + c.name)) : raw("b", c.name));
      row.appendChild(element("span", t(c.ok ? "ok" : "fail"), "status " + (c.ok ? "ok" : "bad")));
      row.appendChild(raw("span", c.detail, "detail"));
    });
  }

  // ------------------------------------------------------------------ wiring

  function onSubmit(formId, errorId, send) {
    $(formId).addEventListener("submit", function (event) {
      event.preventDefault();
      showError(errorId, null);
      var sending;
      try {
        sending = send();
      } catch (error) {  // a field the page itself refuses (a variable line without "=")
        showError(errorId, error);
        return;
      }
      sending.then(function () { refresh(); }, function (error) { showError(errorId, error); });
    });
  }

  function optional(id) { var v = $(id).value.trim(); return v ? v : undefined; }

  document.addEventListener("DOMContentLoaded", function () {
    applyLanguage();
    $("lang").addEventListener("click", function () {
      lang = lang === "en" ? "zh-CN" : "en";
      try {
        localStorage.setItem(LANG_KEY, lang);
      } catch (blocked) {
        // A private window keeps no storage: switched for this visit, not remembered.
      }
      applyLanguage();
    });
    each("[data-tab]", function (b) { b.addEventListener("click", function () { showPage(b.getAttribute("data-tab")); }); });
    each("[data-close]", function (b) {
      b.addEventListener("click", function () { $(b.getAttribute("data-close")).hidden = true; });
    });
    window.addEventListener("hashchange", function () { if (!$("tabs").hidden) { showPage(pageOfHash()); } });
    document.addEventListener("visibilitychange", function () {
      if (!document.hidden && !$("tabs").hidden) { refresh(); }
    });
    onSubmit("login-form", "login-error", function () {
      return api("POST", "/api/login", { password: $("password").value }).then(function () {
        $("password").value = "";
        showApp();
      });
    });
    $("logout").addEventListener("click", function () { api("POST", "/api/logout", {}).then(showLogin, showLogin); });

    // A filter redraws at once from what is known; the last Runs of the crons now shown are asked
    // for once the typing pauses (not a request a keystroke).
    var filterTimer = null;
    ["cron-search", "cron-status", "cron-label"].forEach(function (id) {
      $(id).addEventListener("input", function () {
        cronPage = 0;
        drawCrons();
        clearTimeout(filterTimer);
        filterTimer = setTimeout(function () { loadCrons().catch(function (e) { showError("crons-error", e); }); }, 300);
      });
    });
    $("cron-prev").addEventListener("click", function () { cronPage -= 1; drawCrons(); refresh(); });
    $("cron-next").addEventListener("click", function () { cronPage += 1; drawCrons(); refresh(); });
    $("cron-new").addEventListener("click", newCron);
    onSubmit("cron-form", "cron-form-error", function () {
      var body = cronBody();
      var sent = editingCron === null ? api("POST", "/api/schedules", body) :
        api("POST", "/api/schedules/" + editingCron + "/edit", body);
      return sent.then(function () { $("cron-form").hidden = true; });
    });

    $("run-status").addEventListener("change", function () { runStatus = $("run-status").value; runs = []; refresh(); });
    $("run-filter-clear").addEventListener("click", function () { runFilter = null; runs = []; refresh(); });
    $("run-more").addEventListener("click", moreRuns);
    $("run-new").addEventListener("click", function () { openForm("run-form"); });
    onSubmit("run-form", "run-error", function () {
      var body = { command: ["sh", "-c", $("run-command").value], name: optional("run-name"), timeout: optional("run-timeout") };
      return api("POST", "/api/runs", body).then(function (run) {
        $("run-command").value = "";
        $("run-form").hidden = true;
        openRun(run.id);
      });
    });
    $("follow").addEventListener("change", function () {
      detail.follow = $("follow").checked;
      detail.attempt = null;
      detail.logAttempt = null;  // following again: from the latest Attempt
      pollDetail();
    });
    $("detail-cancel").addEventListener("click", function () { cancelRun(detail.id, "detail-error"); });
    $("detail-close").addEventListener("click", function () {
      stopDetail();
      detail = noDetail(null);
      $("run-detail").hidden = true;
      shown["run-list"] = null;
      drawRuns();
    });

    $("env-new").addEventListener("click", function () { editEnv(null); });
    onSubmit("env-form", "env-form-error", function () {
      var body = { name: $("ef-name").value.trim(), secret: $("ef-secret").checked, remarks: $("ef-remarks").value };
      if ($("ef-value").value || editingEnv === null) { body.value = $("ef-value").value; }
      var sent = editingEnv === null ? api("POST", "/api/envs", body) : api("POST", "/api/envs/" + editingEnv + "/edit", body);
      return sent.then(function () { $("env-form").hidden = true; $("ef-value").value = ""; });
    });

    $("sub-new").addEventListener("click", function () { openForm("sub-form"); });
    onSubmit("sub-form", "sub-form-error", function () {
      var body = { url: $("sf-url").value.trim(), name: optional("sf-name"), branch: optional("sf-branch"),
        schedule: optional("sf-schedule"), whitelist: optional("sf-whitelist"), autoAdd: $("sf-auto-add").checked,
        autoRemove: $("sf-auto-remove").checked };
      return api("POST", "/api/subscriptions", body).then(function (added) {
        $("sub-form").hidden = true;
        $("sf-url").value = "";
        // What the device notes of it (an unencrypted URL, a folder there already), as it says it.
        $("sub-notes").textContent = "";
        added.notes.forEach(function (note) { $("sub-notes").appendChild(raw("code", note)); });
      });
    });

    onSubmit("app-form", "app-form-error", function () {
      var scopes = [];
      each("input[name=scope]:checked", function (c) { scopes.push(c.value); });
      $("app-secret").hidden = true;
      return api("POST", "/api/apps", { name: $("af-name").value.trim(), scopes: scopes, tokenTtl: optional("af-ttl") })
        .then(function (created) {
          $("app-new-id").textContent = created.client_id;
          $("app-new-secret").textContent = created.client_secret;  // this once: only its digest is kept
          $("app-secret").hidden = false;
          $("af-name").value = "";
        });
    });

    $("check-run").addEventListener("click", function () {
      $("check-run").disabled = true;
      $("check-summary").textContent = t("checking");
      showError("device-error", null);
      api("GET", "/api/check").then(function (report) { checkReport = report; drawHealth(); }, function (error) {
        $("check-summary").textContent = "";
        showError("device-error", error);
      }).then(function () { $("check-run").disabled = false; });
    });

    api("GET", "/api/health").then(showApp, showLogin);
  });
}());
