// "My entries", refreshed without reloading: every few seconds the page's own entries are read
// from /entries.json (same page number) and their status, score and verdict cells rewritten
// with textContent (never as HTML; the badge's class from a state or outcome name). Stops once
// every entry on the page has ended.
"use strict";
(function () {
  var table = document.getElementById("entries");
  if (!table) { return; }
  var page = table.getAttribute("data-page") || "1";
  // "received": a phase that gives no feedback until it is published; reload the page after that.
  var ended = function (state) { return state === "done" || state === "parked" || state === "received"; };

  function cell(row, name, text) {
    var td = row.querySelector("td." + name);
    if (td && td.textContent !== text) { td.textContent = text; }
  }

  // The status badge: the outcome once the entry is done, else its state (as the page draws it).
  function badge(row, e) {
    var span = row.querySelector("td.state .badge");
    if (!span) { return; }
    var kind = e.state === "done" && e.outcome ? e.outcome : e.state;
    var text = kind.replace("-", " ") + (e.stage ? " (" + e.stage + ")" : "");
    if (span.textContent !== text) { span.textContent = text; }
    span.className = "badge badge-" + kind;
  }

  function refresh() {
    fetch("/entries.json?page=" + encodeURIComponent(page), {credentials: "same-origin"})
      .then(function (r) { if (!r.ok) { throw new Error(r.status); } return r.json(); })
      .then(function (doc) {
        var running = false;
        doc.entries.forEach(function (e) {
          var row = document.getElementById("entry-" + e.id);
          if (!row) { return; }
          badge(row, e);
          cell(row, "score", e.score === null ? "" : e.score.toFixed(4));
          cell(row, "verdict", e.verdict);
          if (!ended(e.state)) { running = true; }
        });
        table.setAttribute("data-refreshed", String(Date.now()));
        if (running) { setTimeout(refresh, 3000); }
      })
      .catch(function () { setTimeout(refresh, 10000); });
  }
  setTimeout(refresh, 3000);
}());
