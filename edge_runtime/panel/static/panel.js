// The panel's page: plain JavaScript, no build step, nothing fetched but this device's own API.
// Text follows the browser's language (Chinese for zh*, else English); accessible names (aria-label)
// stay English in both, so scripts and screen-reader users find the same controls.
"use strict";

(function () {
  var TEXT = {
    // English: what index.html says, and these for what the script writes.
    en: {
      cancel: "Cancel", details: "Details", pause: "Pause", resume: "Resume", runNow: "Run now", remove: "Remove",
      paused: "paused", wrongPassword: "Wrong password.", worker: "Worker", session: "Session", slots: "Slots in use",
      clock: "Clock", database: "Database", logs: "Logs", retention: "Retention", live: "live", gone: "not live",
      jumps: "clock jumps", noRuns: "No runs yet.", noSchedules: "No schedules.", removeConfirm: "Remove this schedule?",
      days: "days", runsKept: "runs"
    },
    zh: {
      title: "边缘运行时", logout: "退出登录", password: "密码", login: "登录", health: "设备状态",
      newRun: "新建运行", command: "命令", name: "名称", timeout: "超时", run: "运行", runs: "运行记录",
      status: "状态", exit: "退出码", took: "耗时", reason: "原因", log: "日志", close: "关闭",
      newSchedule: "新建定时任务", cron: "Cron 表达式", addSchedule: "添加定时任务", schedules: "定时任务",
      next: "下次", cancel: "取消", details: "详情", pause: "暂停", resume: "恢复", runNow: "立即运行", remove: "删除",
      paused: "已暂停", wrongPassword: "密码错误。", worker: "工作节点", session: "会话", slots: "占用槽位",
      clock: "时钟", database: "数据库", logs: "日志", retention: "保留策略", live: "在线", gone: "离线",
      jumps: "次时钟跳变", noRuns: "暂无运行记录。", noSchedules: "暂无定时任务。", removeConfirm: "确定删除该定时任务？",
      days: "天", runsKept: "条"
    }
  };
  var lang = /^zh/i.test(navigator.language || "") ? "zh" : "en";
  var T = TEXT[lang];
  var ACTIVE = { queued: 1, starting: 1, running: 1, cancelling: 1, retry_wait: 1 };
  var REFRESH_MS = 2000;
  var LOG_POLL_MS = 1000;
  var STARTING_POLL_MS = 200;  // until a new Run is shown running

  var $ = function (id) { return document.getElementById(id); };
  var exitCodes = {};   // finished Run id -> exit code ("" when none): a finished Run never changes
  var selected = null;  // the Run whose detail is shown
  var logOffset = 0;
  var logTimer = null;
  var refreshTimer = null;

  function translate() {
    if (lang !== "zh") { return; }  // the page is written in English
    document.documentElement.lang = "zh-CN";
    document.title = T.title;
    var nodes = document.querySelectorAll("[data-i18n]");
    for (var i = 0; i < nodes.length; i++) { nodes[i].textContent = T[nodes[i].getAttribute("data-i18n")]; }
  }

  function api(method, path, body) {
    var options = { method: method, credentials: "same-origin", headers: {} };
    if (method !== "GET") { options.headers["X-Edge-Panel"] = "1"; }
    if (body !== undefined) {
      options.headers["Content-Type"] = "application/json";
      options.body = JSON.stringify(body);
    }
    return fetch(path, options).then(function (response) {
      return response.json().then(function (value) {
        if (response.status === 401 && path !== "/api/login") { showLogin(); }
        if (!response.ok) {
          var error = new Error((value.error && value.error.message) || response.statusText);
          error.code = value.error && value.error.code;
          throw error;
        }
        return value;
      });
    });
  }

  function element(tag, text, className) {
    var node = document.createElement(tag);
    if (text !== undefined && text !== null) { node.textContent = String(text); }
    if (className) { node.className = className; }
    return node;
  }

  function button(label, visible, onClick, className) {
    var node = element("button", visible, className || "secondary");
    node.type = "button";
    node.setAttribute("aria-label", label);
    node.addEventListener("click", onClick);
    return node;
  }

  function commandText(command) {
    if (!command) { return ""; }
    if (command.length === 3 && command[0] === "sh" && command[1] === "-c") { return command[2]; }
    return command.map(function (a) { return /^[\w@%+=:,./-]+$/.test(a) ? a : "'" + a.replace(/'/g, "'\\''") + "'"; }).join(" ");
  }

  function duration(ms) {
    if (ms === undefined || ms === null || ms < 0) { return ""; }
    if (ms < 1000) { return ms + "ms"; }
    var s = Math.round(ms / 1000);
    if (s < 60) { return s + "s"; }
    var m = Math.floor(s / 60);
    return m < 60 ? m + "m" + (s % 60) + "s" : Math.floor(m / 60) + "h" + (m % 60) + "m";
  }

  function bytes(n) {
    if (n < 1024) { return n + " B"; }
    if (n < 1048576) { return (n / 1024).toFixed(1) + " KiB"; }
    return (n / 1048576).toFixed(1) + " MiB";
  }

  function when(ms) { return ms ? new Date(ms).toLocaleString(lang === "zh" ? "zh-CN" : undefined) : ""; }

  // ------------------------------------------------------------------ views

  function showLogin() {
    stopTimers();
    $("app-view").hidden = true;
    $("logout").hidden = true;
    $("login-view").hidden = false;
    $("password").focus();
  }

  function showApp() {
    $("login-view").hidden = true;
    $("app-view").hidden = false;
    $("logout").hidden = false;
    refresh();
  }

  function stopTimers() {
    if (refreshTimer) { clearTimeout(refreshTimer); refreshTimer = null; }
    if (logTimer) { clearTimeout(logTimer); logTimer = null; }
  }

  function refresh() {
    if (refreshTimer) { clearTimeout(refreshTimer); }
    Promise.all([loadRuns(), loadSchedules(), loadHealth()]).catch(function () { return null; }).then(function () {
      if (!$("app-view").hidden) { refreshTimer = setTimeout(refresh, REFRESH_MS); }
    });
  }

  function loadHealth() {
    return api("GET", "/api/health").then(function (h) {
      var list = $("health-list");
      list.textContent = "";
      var rows = [
        [T.worker, h.workerId],
        [T.session, h.sessionLive ? T.live : T.gone],
        [T.slots, h.slotsInUse + " / " + h.slots],
        [T.clock, when(h.nowMs) + (h.clockJumps ? " (" + h.clockJumps + " " + T.jumps + ")" : "")],
        [T.database, bytes(h.databaseBytes) + " + WAL " + bytes(h.walBytes)],
        [T.logs, bytes(h.logBytes) + " / " + bytes(h.logTotalMaxBytes)],
        [T.retention, h.retainRuns + " " + T.runsKept + ", " + h.retainDays + " " + T.days]
      ];
      rows.forEach(function (row) { list.appendChild(element("dt", row[0])); list.appendChild(element("dd", row[1])); });
    });
  }

  // A list's table, filled from the API: a row per item (rowOf makes it), or one row across every
  // column of its header saying there is none.
  function loadTable(path, tableId, noneText, rowOf) {
    return api("GET", path).then(function (items) {
      var table = $(tableId);
      var body = table.tBodies[0];
      body.textContent = "";
      if (!items.length) {
        var empty = element("td", noneText);
        empty.colSpan = table.tHead.rows[0].cells.length;
        body.appendChild(element("tr")).appendChild(empty);
      }
      items.forEach(function (item) { body.appendChild(rowOf(item)); });
    });
  }

  function loadRuns() {
    return loadTable("/api/runs?limit=50", "runs", T.noRuns, function (run) {
      var row = element("tr");
      row.setAttribute("data-run", run.id);
      if (run.id === selected) { row.className = "selected"; }
      row.appendChild(element("td", run.status, "status status-" + run.status));
      row.appendChild(element("td", run.name || ""));
      row.appendChild(element("td", commandText(run.command), "command"));
      var exitCell = row.appendChild(element("td", exitCodes[run.id] !== undefined ? exitCodes[run.id] : ""));
      row.appendChild(element("td", run.finishedAtMs ? duration(run.finishedAtMs - run.createdAtMs) : ""));
      var actions = row.appendChild(element("td", null, "actions"));
      actions.appendChild(button("Details", T.details, function () { select(run.id); }));
      if (ACTIVE[run.status]) {
        actions.appendChild(button("Cancel", T.cancel, function () { cancelRun(run.id); }, "danger"));
      } else if (exitCodes[run.id] === undefined) {
        exitCodeOf(run.id, exitCell);
      }
      return row;
    });
  }

  function exitCodeOf(runId, cell) {
    api("GET", "/api/runs/" + runId).then(function (detail) {
      var last = detail.attempts[detail.attempts.length - 1];
      exitCodes[runId] = last && last.exitCode !== undefined ? last.exitCode : "";
      cell.textContent = exitCodes[runId];
    }).catch(function () { return null; });
  }

  function cancelRun(runId) {
    api("POST", "/api/runs/" + runId + "/cancel", {}).then(refresh, function (error) { alert(error.message); });
  }

  function select(runId) {
    selected = runId;
    logOffset = 0;
    $("log").textContent = "";
    $("detail").hidden = false;
    $("detail-id").textContent = runId;
    loadDetail();
  }

  function loadDetail() {
    if (logTimer) { clearTimeout(logTimer); logTimer = null; }
    if (!selected) { return; }
    var runId = selected;
    api("GET", "/api/runs/" + runId).then(function (detail) {
      if (runId !== selected) { return null; }
      $("detail-status").textContent = detail.status;
      $("detail-status").className = "status status-" + detail.status;
      var body = $("attempts").tBodies[0];
      body.textContent = "";
      detail.attempts.forEach(function (a) {
        var row = body.appendChild(element("tr"));
        [a.attempt, a.status, a.pid, a.exitCode, a.endReason].forEach(function (v) {
          row.appendChild(element("td", v === undefined ? "" : v));
        });
      });
      var soon = detail.status === "queued" || detail.status === "starting";
      if (!detail.attempts.length) { return { done: !ACTIVE[detail.status], soon: soon }; }
      return api("GET", "/api/runs/" + runId + "/log?offset=" + logOffset).then(function (chunk) {
        if (runId !== selected) { return chunk; }
        if (chunk.text) {
          var log = $("log");
          var atBottom = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
          log.textContent += chunk.text;
          if (atBottom) { log.scrollTop = log.scrollHeight; }
        }
        logOffset = chunk.nextOffset;
        return { done: chunk.done && !ACTIVE[detail.status], soon: soon };
      }, function () { return { done: !ACTIVE[detail.status], soon: soon }; });
    }).then(function (state) {
      if (state && !state.done && runId === selected) {
        logTimer = setTimeout(loadDetail, state.soon ? STARTING_POLL_MS : LOG_POLL_MS);
      }
    }, function () { return null; });
  }

  function loadSchedules() {
    return loadTable("/api/schedules", "schedules", T.noSchedules, function (s) {
      var row = element("tr");
      row.setAttribute("data-schedule", s.id);
      row.appendChild(element("td", s.expression, "command"));
      row.appendChild(element("td", s.name || ""));
      row.appendChild(element("td", commandText(s.command), "command"));
      // A schedule the service paused because it cannot fire says why (text, never markup).
      var state = s.pauseReason ? T.paused + ": " + s.pauseReason : T.paused;
      row.appendChild(element("td", s.paused ? state : when(s.nextFireAtMs)));
      var actions = row.appendChild(element("td", null, "actions"));
      var act = function (path) {
        return function () {
          api("POST", "/api/schedules/" + s.id + "/" + path, {}).then(refresh, function (e) { alert(e.message); });
        };
      };
      actions.appendChild(s.paused ? button("Resume", T.resume, act("resume")) : button("Pause", T.pause, act("pause")));
      actions.appendChild(button("Run now", T.runNow, act("run")));
      actions.appendChild(button("Remove", T.remove, function () {
        if (!confirm(T.removeConfirm)) { return; }
        api("DELETE", "/api/schedules/" + s.id).then(refresh, function (e) { alert(e.message); });
      }, "danger"));
      return row;
    });
  }

  // ------------------------------------------------------------------ forms

  function onSubmit(form, errorId, send) {
    $(form).addEventListener("submit", function (event) {
      event.preventDefault();
      $(errorId).textContent = "";
      send().then(function () { refresh(); }, function (error) { $(errorId).textContent = error.message; });
    });
  }

  function optional(id) { var v = $(id).value.trim(); return v ? v : undefined; }

  document.addEventListener("DOMContentLoaded", function () {
    translate();
    onSubmit("login-form", "login-error", function () {
      return api("POST", "/api/login", { password: $("password").value }).then(function () {
        $("password").value = "";
        showApp();
      }, function (error) {
        throw new Error(error.code === "LOGIN_FAILED" ? T.wrongPassword : error.message);
      });
    });
    onSubmit("run-form", "run-error", function () {
      var body = { command: ["sh", "-c", $("run-command").value], name: optional("run-name"),
                   timeout: optional("run-timeout") };
      return api("POST", "/api/runs", body).then(function (run) {
        $("run-command").value = "";
        select(run.id);
      });
    });
    onSubmit("schedule-form", "schedule-error", function () {
      var body = { cron: $("schedule-cron").value.trim(), command: ["sh", "-c", $("schedule-command").value],
                   name: optional("schedule-name") };
      return api("POST", "/api/schedules", body).then(function () {
        $("schedule-cron").value = "";
        $("schedule-command").value = "";
        $("schedule-name").value = "";
      });
    });
    $("logout").addEventListener("click", function () {
      api("POST", "/api/logout", {}).then(showLogin, showLogin);
    });
    $("detail-close").addEventListener("click", function () {
      selected = null;
      $("detail").hidden = true;
      if (logTimer) { clearTimeout(logTimer); logTimer = null; }
    });
    api("GET", "/api/health").then(showApp, showLogin);
  });
}());
