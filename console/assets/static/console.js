// The overview updates itself from the console's own JSON (api/overview)
// every two seconds; rates are the counters' differences over the time
// between two readings of the broker's clock. Without JavaScript the page
// still shows everything as of its loading.
(function () {
  "use strict";
  var table = document.querySelector('[data-live="overview"]');
  if (!table) return;
  var prefix = document.body.dataset.prefix || "";
  var last = null;
  function ago(s) {
    if (s <= 0) return "–";
    if (s < 60) return (Math.round(s * 10) / 10) + "s";
    if (s < 3600) return Math.floor(s / 60) + "m" + Math.round(s % 60) + "s";
    return Math.floor(s / 3600) + "h" + Math.round((s % 3600) / 60) + "m";
  }
  // when formats an RFC 3339 time as the pages do: "2006-01-02 15:04:05.000" (UTC).
  function when(s) {
    var m = /^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})(?:\.(\d+))?Z$/.exec(s);
    if (!m) return s;
    return m[1] + " " + m[2] + "." + ((m[3] || "") + "000").slice(0, 3);
  }
  function rate(now, before, secs) {
    if (before === undefined || secs <= 0) return "…";
    var r = (now - before) / secs;
    return r < 10 ? r.toFixed(1) : Math.round(r).toString();
  }
  function tick() {
    fetch(prefix + "/api/overview", { headers: { Accept: "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (o) {
        if (!o) return;
        var t = Date.parse(o.time) / 1000;
        var secs = last ? t - last.t : 0;
        var seen = {};
        o.subscriptions.forEach(function (s) {
          var k = s.topic + "\u0000" + s.name;
          seen[k] = s;
          var row = null;
          table.querySelectorAll("tbody tr[data-topic]").forEach(function (tr) {
            if (tr.dataset.topic === s.topic && tr.dataset.name === s.name) row = tr;
          });
          if (!row) return; // a new subscription shows on the next load
          var set = function (f, v) { var c = row.querySelector('[data-f="' + f + '"]'); if (c) c.textContent = v; };
          set("depth", s.depth); set("visible", s.limited ? s.visible + " (" + s.limited + " limited)" : s.visible); set("inFlight", s.inFlight);
          set("delayed", s.delayed); set("heldBack", s.heldBack); set("oldest", ago(s.oldestVisibleAgeSeconds));
          var p = last && last.subs[k];
          set("publishRate", rate(s.published, p ? p.published : undefined, secs));
          set("ackRate", rate(s.acked, p ? p.acked : undefined, secs));
          set("deadRate", rate(s.deadLettered, p ? p.deadLettered : undefined, secs));
        });
        var now = document.getElementById("now");
        if (now) now.textContent = when(o.time);
        last = { t: t, subs: seen };
      })
      .catch(function () {});
  }
  tick();
  setInterval(tick, 2000);
})();
