// Live status: poll the JSON feed; no framework, nothing from the network.
"use strict";
(function () {
  const PERIOD = 2000;
  const table = document.querySelector("table[data-poll]");
  if (table) {
    setInterval(async function () {
      const answer = await fetch(table.dataset.poll, { credentials: "same-origin" });
      if (!answer.ok) return;
      const data = await answer.json();
      for (const row of data.sessions) {
        const tr = table.querySelector('tr[data-session="' + row.session_id + '"]');
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
      // New events: show them, unless someone is filling in a form.
      if (String(row.steps) !== badge.dataset.steps && !typing && !document.querySelector("#replay")) {
        window.location.replace(window.location.pathname);
      }
    }, PERIOD);
  }
})();
