// Live status: poll the JSON feed; no framework, nothing from the network.
// Rows are found by their data-session attribute, compared as plain strings:
// no CSS selector is ever built from a session id (any character may be in one).
"use strict";
(function () {
  const PERIOD = 2000;
  const table = document.querySelector("table[data-poll]");
  if (table) {
    const rows = new Map();
    for (const tr of table.querySelectorAll("tr[data-session]")) {
      rows.set(tr.dataset.session, tr);
    }
    setInterval(async function () {
      const answer = await fetch(table.dataset.poll, { credentials: "same-origin" });
      if (!answer.ok) return;
      const data = await answer.json();
      for (const row of data.sessions) {
        const tr = rows.get(row.session_id);
        if (!tr) continue;
        const status = tr.querySelector('[data-field="status"]');
        status.textContent = row.status;
        status.className = "status status-" + row.status;
        tr.querySelector('[data-field="steps"]').textContent = row.steps;
        tr.querySelector('[data-field="updated"]').textContent = row.updated;
      }
    }, PERIOD);
  }
  const badge = document.querySelector("#status[data-poll]");
  if (badge) {
    setInterval(async function () {
      const answer = await fetch(badge.dataset.poll, { credentials: "same-origin" });
      if (!answer.ok) return;
      const row = await answer.json();
      badge.textContent = row.status;
      badge.className = "status status-" + row.status;
      const typing = document.activeElement && ["TEXTAREA", "INPUT"].includes(document.activeElement.tagName);
      // New events: show them, unless someone is filling in a form. The page is
      // reloaded from the session's own address (this one may be a form's answer),
      // on the page of events shown, if one was chosen.
      if (String(row.steps) !== badge.dataset.steps && !typing && !document.querySelector("#replay")) {
        const page = new URLSearchParams(window.location.search).get("page");
        window.location.replace(badge.dataset.href + (page ? "?page=" + encodeURIComponent(page) : ""));
      }
    }, PERIOD);
  }
})();
