/* The counters-tasks dashboard: reads the JSON endpoints (the same answers as the CLI's --json)
 * and draws them. The counter chart and the health panel are polled (live); the rest follows
 * the controls. Each section counts its renders in data-loaded (tests wait on it). */
(function () {
  "use strict";
  var params = new URLSearchParams(location.search);
  // ?refresh=<ms>: 250 ms to 10 min; anything else (e.g. ?refresh=abc: NaN) means the default 5 s
  var asked = parseInt(params.get("refresh") || "", 10);
  var REFRESH = isFinite(asked) ? Math.min(600000, Math.max(250, asked)) : 5000;
  var $ = function (id) { return document.getElementById(id); };

  // ?site=<name>: the site every figure is read for (the header's switch sets it); none: the default site
  var SITE = params.get("site") || "";

  function api(path, query) {
    var q = new URLSearchParams();
    if (SITE && path !== "health") q.set("site", SITE);
    for (var k in query || {}) if (query[k] !== "" && query[k] != null) q.set(k, query[k]);
    return fetch("api/" + path + (q.toString() ? "?" + q : ""), {cache: "no-store"}).then(function (r) {
      return r.json().catch(function () { return {}; }).then(function (body) {
        if (!r.ok) { var e = new Error(body.error || r.status + " " + r.statusText); e.status = r.status; throw e; }
        return body;
      });
    });
  }

  function loaded(id) {
    var node = $(id);
    node.dataset.loaded = String(parseInt(node.dataset.loaded || "0", 10) + 1);
    node.dataset.state = "ok";
  }

  function failed(id, error) {
    var node = $(id);
    node.dataset.state = error.status === 404 ? "unavailable" : "error";
    var box = $(id + "-error");
    if (box) box.textContent = error.message;
    if (error.status === 404) node.style.display = "none";
  }

  function cell(row, text, cls) {
    var td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    row.appendChild(td);
    return td;
  }

  // A UV as the page shows it (views.uv_view): an estimate "≈N ±X%", X its relative standard error
  // from the answer's own uv_error (one decimal, as the CLI prints it), hover text "estimate: ±X%
  // standard error"; an exact figure plain, "exact" on hover.
  function uvBound(f) { return "±" + (f.uv_error * 100).toFixed(1) + "%"; }
  function uvText(f) { return f.uv_exact ? String(f.uv) : "≈" + f.uv + " " + uvBound(f); }
  function uvTitle(f) { return f.uv_exact ? "exact" : "estimate: " + uvBound(f) + " standard error"; }
  function uvCell(row, f) {
    var td = cell(row, uvText(f), "num");
    td.title = uvTitle(f);
    return td;
  }

  function fillTable(body, rows) {
    body.textContent = "";
    rows.forEach(function (cells, i) {
      var tr = document.createElement("tr");
      cell(tr, String(i + 1));
      cell(tr, cells[0]);
      cell(tr, String(cells[1]), "num");
      body.appendChild(tr);
    });
  }

  function range() { return {from: $("from").value, to: $("to").value}; }

  function shortDay(day) { return day.slice(5); }

  function timeLabel(ts, precision) {
    var d = new Date(ts * 1000), pad = function (n) { return String(n).padStart(2, "0"); };
    if (precision >= 86400) return d.toISOString().slice(5, 10);
    if (precision >= 3600) return pad(d.getDate()) + " " + pad(d.getHours()) + "h";
    return pad(d.getHours()) + ":" + pad(d.getMinutes()) + (precision < 60 ? ":" + pad(d.getSeconds()) : "");
  }

  // What the figures count that a reader would not assume, under the section (views.counts_view,
  // event_views.followed_view; only with COUNTERS_VISITOR_KEY=daily): UV over several days counts
  // visitor-days; a visitor is not followed past midnight (docs/privacy.md, "Privacy modes");
  // and days of the range past their retention count 0 (views.retention_view)
  function privacyNote(section, data) {
    var id = section + "-privacy", el = $(id);
    if (!el) {
      el = document.createElement("div");
      el.className = "muted";
      el.id = id;
      $(section + "-error").before(el);
    }
    el.textContent = [data.uv_note, data.visitor_note, data.retention_note].filter(Boolean).join(" ");
    el.hidden = !el.textContent;
  }

  function loadVisitors() {
    var q = range();
    q.path = $("path").value;
    return api("stats", q).then(function (data) {
      $("pv-total").textContent = data.pv;
      $("uv-total").textContent = data.uv;
      $("uv-total").title = uvTitle(data);
      // "≈ ±X%" only on a true estimate (views.stats_view: one day, or a range whose visitors all
      // came on one day, has that day's figure, exact in the default mode)
      // (one day's figure is an estimate only with COUNTERS_UV_MODE=hll: no union of days then)
      $("uv-note").textContent = data.uv_exact ? "" : " ≈ " + uvBound(data) +
        (data.from === data.to ? " (an estimate: COUNTERS_UV_MODE=hll)" : " (an estimate of the union of the days)");
      // what the figures leave out, beside them: the site's requests that were not page views
      // (a path's figures have none of their own)
      $("skipped").hidden = data.skipped === undefined;
      if (data.skipped !== undefined) {
        $("skipped-total").textContent = data.skipped_total;
        $("skipped-reasons").textContent = Object.keys(data.skipped)
          .sort(function (a, b) { return data.skipped[b] - data.skipped[a]; })
          .map(function (r) { return " " + r + " " + data.skipped[r]; }).join(",");
        $("skipped").classList.toggle("warn", data.skipped_total > data.pv);
      }
      Charts.render($("visitors-chart"), {
        labels: data.days.map(function (d) { return shortDay(d.day); }),
        series: [{name: "PV", kind: "bar", values: data.days.map(function (d) { return d.pv; })},
                 {name: "UV", kind: "line", values: data.days.map(function (d) { return d.uv; }),
                  shown: data.days.map(uvText)}]});
      privacyNote("visitors", data);
      $("visitors-error").textContent = "";
      loaded("visitors");
    }).catch(function (e) { failed("visitors", e); });
  }

  function loadPages() {
    var q = range();
    q.limit = 10;
    return api("top-pages", q).then(function (data) {
      fillTable($("pages-table"), data.pages);
      privacyNote("pages", data);
      $("pages-error").textContent = "";
      loaded("pages");
    }).catch(function (e) { failed("pages", e); });
  }

  function loadSources() {
    var q = range();
    q.kind = $("source-kind").value;
    q.limit = 10;
    return api("sources", q).then(function (data) {
      var body = $("sources-table");
      body.textContent = "";
      data.sources.forEach(function (s, i) {
        var tr = document.createElement("tr");
        cell(tr, String(i + 1));
        cell(tr, s.source);
        cell(tr, String(s.pv), "num");
        uvCell(tr, s);
        body.appendChild(tr);
      });
      privacyNote("sources", data);
      $("sources-error").textContent = "";
      loaded("sources");
    }).catch(function (e) { failed("sources", e); });
  }

  function loadClients() {
    var q = range();
    q.kind = $("client-kind").value;
    q.path = $("client-page").value;
    q.limit = 10;
    return api("clients", q).then(function (data) {
      if (data.kind !== $("client-kind").value || (data.path || "") !== $("client-page").value) return;  // the choice changed meanwhile
      // the pages of COUNTERS_CLIENT_PAGES, if any: who viewed one of them instead of the whole site
      var pages = $("client-page");
      if (pages.options.length !== data.pages.length + 1) {
        data.pages.forEach(function (page) {
          var option = document.createElement("option");
          option.value = option.textContent = page;
          pages.appendChild(option);
        });
      }
      pages.hidden = !data.pages.length;
      var body = $("clients-table");
      body.textContent = "";
      var listed = false;
      data.clients.forEach(function (c, i) {
        var tr = document.createElement("tr");
        cell(tr, String(i + 1));
        cell(tr, c.value);
        cell(tr, String(c.pv), "num");
        uvCell(tr, c);
        body.appendChild(tr);
        if (c.value === "(other)") listed = true;
      });
      $("client-column").textContent = data.kind;
      // the views folded into (other) are said beside the figures, also when (other) is not a row
      $("clients-other").textContent = data.other ?
        "(other): " + data.other + " page views of values past a day's cap" +
        (listed ? "" : ", not among the " + data.clients.length + " listed") :
        data.clients.length ? "" :
        "None counted in the range: who visits is counted by the workers unless COUNTERS_CLIENT_TABLES=off.";
      // what the table does not show: the rows past its limit, and the period's page views counted
      // while the tables were off (or before the page was listed): views.listed_view, coverage_view
      var coverage = [];
      if (data.more) coverage.push(data.more + " more values not listed (" + data.total + " in all)");
      if (data.not_in_table) {
        coverage.push(data.not_in_table + " page views not in this table (" +
          (data.path ? "tables off, or the page not in COUNTERS_CLIENT_PAGES, then" : "tables off then") +
          "): " + data.table_pv + " of the period's " + data.pv + " are");
      }
      if (!data.client_tables && data.clients.length) coverage.push("who visits tables off now (COUNTERS_CLIENT_TABLES)");
      $("clients-coverage").textContent = coverage.join("; ");
      privacyNote("clients", data);
      $("clients-error").textContent = "";
      loaded("clients");
    }).catch(function (e) { failed("clients", e); });
  }

  function loadUniques() {
    return api("uniques", range()).then(function (data) {
      $("uniques-total").textContent = data.visitors;
      $("uniques-note").textContent = data.missing_days.length ?
        "per-visitor data expired for " + data.missing_days.length + " day(s); the total covers the others" : "";
      Charts.render($("uniques-chart"), {
        labels: data.days.map(function (d) { return shortDay(d.day); }),
        series: [{name: "sessions", kind: "bar", color: "#54a24b",
                  values: data.days.map(function (d) { return d.visitors; })}]});
      privacyNote("uniques", data);
      $("uniques-error").textContent = "";
      loaded("uniques");
    }).catch(function (e) { failed("uniques", e); });
  }

  // Events, goals and funnels (docs/events.md): the same answers as the CLI's events, goals, funnel NAME
  function pct(share, exact) { return (exact === false ? "≈" : "") + (share * 100).toFixed(1) + "%"; }

  function loadEvents() {
    return api("events", range()).then(function (data) {
      var body = $("events-table"), noVisitor = 0, dropped = 0, other = false, none = false;
      body.textContent = "";
      data.events.forEach(function (e, i) {
        var tr = document.createElement("tr");
        tr.dataset.event = e.name;
        cell(tr, String(i + 1));
        cell(tr, e.name);
        cell(tr, String(e.total), "num");
        uvCell(tr, e);
        // each property's values by count: "plan: pro 3, free 2" (the JSON has every value with its UV)
        cell(tr, Object.keys(e.props).map(function (key) {
          var values = e.props[key];
          values.forEach(function (v) { other = other || v.value === "(other)"; none = none || v.value === "(none)"; });
          var shown = values.slice(0, 5).map(function (v) { return v.value + " " + v.total; }).join(", ");
          return key + ": " + shown + (values.length > 5 ? ", +" + (values.length - 5) + " more" : "");
        }).join("; "), "props");
        body.appendChild(tr);
        noVisitor += e.no_visitor;
        dropped += e.dropped_props;
        other = other || e.name === "(other)";
      });
      var notes = [];
      if (noVisitor) notes.push("events without a visitor (no IP): " + noVisitor + ", counted, in no UV");
      if (dropped) notes.push("properties dropped past the 30 an event keeps: " + dropped);
      if (other) notes.push("(other): the event names or values past a day's cap, their counts shown");
      if (none) notes.push("(none): the events without that property");
      if (!data.events.length) notes.push("None counted in the range: an app sends them with track_event (docs/events.md).");
      $("events-notes").textContent = notes.join("; ");
      privacyNote("events", data);
      $("events-error").textContent = "";
      loaded("events");
    }).catch(function (e) { failed("events", e); });
  }

  function loadGoals() {
    return api("goals", range()).then(function (data) {
      var body = $("goals-table"), partial = false;
      body.textContent = "";
      $("goals-visitors").textContent = "rates of " + (data.visitors_exact ? data.visitors :
        "≈" + data.visitors + " ±" + (data.visitors_error * 100).toFixed(1) + "%") + " unique visitors in the range";
      data.goals.forEach(function (g) {
        var tr = document.createElement("tr");
        tr.dataset.goal = g.name;
        cell(tr, g.name + (g.partial ? " *" : "")).title = "counts from " + g.since_iso;
        cell(tr, g.label);
        cell(tr, String(g.conversions), "num");
        uvCell(tr, {uv: g.converters, uv_exact: g.converters_exact, uv_error: g.converters_error});
        cell(tr, pct(g.rate, g.rate_exact), "num");
        var revenue = cell(tr, g.revenue == null ? "" : String(Number(g.revenue.toFixed(2))) + (g.no_revenue ? " *" : ""), "num");
        if (g.no_revenue) revenue.title = "conversions without a numeric revenue property: " + g.no_revenue;
        body.appendChild(tr);
        partial = partial || g.partial;
      });
      var noRevenue = data.goals.filter(function (g) { return g.no_revenue; }).map(function (g) {
        return g.name + ": conversions without a numeric revenue property: " + g.no_revenue + " (in conversions, not revenue). ";
      }).join("");
      $("goals-notes").textContent = noRevenue + (partial ? "*: defined after the range began: counts from its time only (hover). " : "") +
        (data.goals.length ? "" : "No goal defined: counters-tasks define-goal NAME (--page P | --event E) (docs/events.md).");
      privacyNote("goals", data);
      $("goals-error").textContent = "";
      loaded("goals");
    }).catch(function (e) { failed("goals", e); });
  }

  function drawFunnel(data) {
    var box = $("funnel-chart");
    box.textContent = "";
    data.steps.forEach(function (step, i) {
      var row = document.createElement("div");
      row.className = "funnel-step";
      row.dataset.step = step.step;
      row.dataset.visitors = step.visitors;
      row.dataset.ofFirst = step.of_first;
      var label = document.createElement("div");
      label.textContent = step.step + ". " + step.label + (step.step_window ? " (within " + step.step_window_text + ")" : "");
      var bar = document.createElement("div");
      bar.className = "bar";
      bar.style.width = (100 * step.of_first).toFixed(1) + "%";
      bar.title = step.time_to_convert.filter(function (b) { return b.visitors; })
        .map(function (b) { return b.bucket + ": " + b.visitors; }).join(", ");
      var share = document.createElement("div");
      share.className = "share";
      share.textContent = step.visitors + (step.visitors === 1 ? " visitor, " : " visitors, ") + pct(step.of_first) + " of the first" +
        (i ? ", " + pct(step.of_previous) + " of the step before" : "");
      row.appendChild(label);
      row.appendChild(bar);
      row.appendChild(share);
      if (i && bar.title) {  // the time from the step before, by bucket (the buckets with visitors)
        var times = document.createElement("div");
        times.className = "muted times";
        times.textContent = "time from step " + data.steps[i - 1].step + ": " + bar.title;
        row.appendChild(times);
      }
      box.appendChild(row);
    });
    var notes = ["within " + data.window_text + ", by the day each visitor entered; counts from " + data.since_iso +
      (data.partial ? " (defined after the range began)" : "")];
    if (data.open_days.length) notes.push("still open (may grow): " + data.open_days.join(", "));
    if (data.late) notes.push("step events later than the window plus COUNTERS_FUNNEL_LATENESS: " + data.late + ", not judged");
    if (data.capped) notes.push("step events past their visitor's state cap: " + data.capped + ", not judged");
    $("funnel-notes").textContent = notes.join("; ");
  }

  function loadFunnel() {
    var name = $("funnel-name").value;
    if (!name) {  // none chosen: ask for the list again, so the first funnel shows up by itself
      return api("funnels").then(function (data) {
        var names = data.funnels.map(function (f) { return f.name; });
        fillSelect($("funnel-name"), names, params.get("funnel"));
        $("funnel-name").hidden = !names.length;
        if (names.length) return loadFunnel();
        $("funnel-empty").hidden = false;
        $("funnel-error").textContent = "";
        loaded("funnel");
      }).catch(function (e) { failed("funnel", e); });
    }
    var q = range();
    q.name = name;
    return api("funnel", q).then(function (data) {
      if (data.name !== $("funnel-name").value) return;  // the choice changed meanwhile
      $("funnel-empty").hidden = true;
      drawFunnel(data);
      privacyNote("funnel", data);
      $("funnel-error").textContent = "";
      loaded("funnel");
    }).catch(function (e) {
      if (e.status === 400) $("funnel-name").textContent = "";  // removed: the list again next time
      failed("funnel", e);
    });
  }

  function loadCounter() {
    var name = $("counter-name").value;
    if (!name) return Promise.resolve();
    return api("counter", {name: name, precision: $("counter-precision").value, last: params.get("last") || ""})
      .then(function (data) {
        if (data.name !== $("counter-name").value) return;  // the choice changed meanwhile
        var points = data.points;
        $("counter-total").textContent = data.total;
        $("counter-latest").textContent = points.length ? points[points.length - 1][1] : 0;
        Charts.render($("counter-chart"), {
          labels: points.map(function (p) { return timeLabel(p[0], data.precision); }),
          series: [{name: data.name + " per " + data.precision + "s", kind: "bar",
                    values: points.map(function (p) { return p[1]; })}]});
        $("counter-error").textContent = "";
        loaded("counter");
      }).catch(function (e) { failed("counter", e); });
  }

  function showBoards(any) {  // no board yet: say what fills one instead of an empty table
    $("board-box").hidden = !any;
    $("rankings-empty").hidden = any;
  }

  function loadBoard() {
    var board = $("board").value;
    if (!board) {  // no board chosen: ask for the list again, so the first board shows up by itself
      return api("boards").then(function (data) {
        fillSelect($("board"), data.boards, params.get("board"));
        if (data.boards.length) return loadBoard();
        showBoards(false);
        $("rankings-error").textContent = "";
        loaded("rankings");
      }).catch(function (e) { failed("rankings", e); });
    }
    return api("top", {board: board, limit: 10}).then(function (data) {
      showBoards(true);
      $("board-window").textContent = "last " + data.period_hours + " h, every " + data.interval_hours + " h";
      fillTable($("board-table"), data.top);
      $("rankings-error").textContent = "";
      loaded("rankings");
    }).catch(function (e) {
      if (e.status === 400) $("board").textContent = "";  // the board is gone (deleted, idle): the list again next time
      failed("rankings", e);
    });
  }

  function loadHealth() {
    return api("health").then(function (data) {
      var parts = ["redis", "data", "workers", "beat", "queues"];
      data.data = data.deployment;  // the deployment's check, named as the CLI's health names it
      var badges = $("health");
      badges.textContent = "";
      parts.forEach(function (part) {
        var b = document.createElement("span");
        b.className = "badge " + (data[part].ok ? "ok" : "fail");
        b.dataset.check = part;
        b.dataset.ok = data[part].ok ? "1" : "0";
        b.textContent = part + (data[part].ok ? " ok" : " FAIL");
        badges.appendChild(b);
      });
      var rows = $("health-table");
      rows.textContent = "";
      var detail = {
        redis: data.redis.ok ? data.redis.latency_ms + " ms" : data.redis.error,
        data: data.deployment.error || data.deployment.problem || data.deployment.warning ||
          (data.deployment.recent_loss ? "Redis LOST ITS DATA: figures before then are gone" : "visible"),
        workers: (data.workers.names || []).join(", ") || data.workers.error || "no worker answered",
        beat: data.beat.error || ("clean_counters last started " + ago(data.beat.last_run_age_seconds) +
          (data.beat.started_age_seconds == null ? "" : ", beat started " + ago(data.beat.started_age_seconds))),
        queues: data.queues.ok ? "visits " + data.queues.visits + ", maintenance " + data.queues.maintenance : data.queues.error
      };
      parts.forEach(function (part) {
        var tr = document.createElement("tr");
        cell(tr, part);
        cell(tr, data[part].ok ? "ok" : "FAIL", data[part].ok ? "ok" : "fail");
        cell(tr, String(detail[part]));
        rows.appendChild(tr);
      });
      // what was refused (bad input, by reason) and set aside (dead letters): counts, no badge
      var extra = [];
      if (data.refused) {
        extra.push(["refused", Object.keys(data.refused).map(function (r) { return r + " " + data.refused[r]; }).join(", ")]);
      }
      if (data.dead_letters) {
        extra.push(["dead letters", data.dead_letters.count + " set aside (counters-tasks dead-letters list)"]);
      }
      extra.forEach(function (pair) {
        var tr = document.createElement("tr");
        tr.dataset.row = pair[0];
        cell(tr, pair[0]);
        cell(tr, "");
        cell(tr, pair[1]);
        rows.appendChild(tr);
      });
      var jobs = $("jobs-table");
      jobs.textContent = "";
      Object.keys(data.jobs || {}).forEach(function (job) {
        var info = data.jobs[job], tr = document.createElement("tr");
        cell(tr, job);
        cell(tr, ago(info.age_seconds));
        cell(tr, info.last_duration == null ? "" : (info.last_duration * 1000).toFixed(1) + " ms", "num");
        cell(tr, info.last_result == null ? "" : info.last_result);
        cell(tr, String(info.skipped), "num");
        jobs.appendChild(tr);
      });
      $("updated").textContent = "updated " + new Date().toLocaleTimeString();
      loaded("health");
      loaded("health-panel");
    }).catch(function (e) { failed("health-panel", e); });
  }

  function loadNow() {
    return api("now").then(function (data) {
      $("now-total").textContent = data.visitors;
      loaded("now");
    }).catch(function (e) { failed("now", e); });
  }

  function ago(seconds) { return seconds == null ? "never" : Math.round(seconds) + " s ago"; }

  function fillSelect(select, values, wanted) {
    select.textContent = "";
    values.forEach(function (v) {
      var o = document.createElement("option");
      o.value = o.textContent = String(v);
      select.appendChild(o);
    });
    if (wanted != null && values.map(String).indexOf(String(wanted)) >= 0) select.value = String(wanted);
  }

  function daysBefore(isoDay, n) {
    var d = new Date(isoDay + "T00:00:00Z");
    d.setUTCDate(d.getUTCDate() - n);
    return d.toISOString().slice(0, 10);
  }

  function init() {
    // "today" is the site's (its zone, COUNTERS_TIMEZONE by default), not the browser's
    api("config").then(start, function () { start({today: new Date().toISOString().slice(0, 10)}); });
  }

  function siteSwitch(config) {
    var sites = config.sites || [];
    if (sites.length < 2) return;  // one site: no switch
    var select = $("site");
    fillSelect(select, sites, config.site);
    select.parentNode.hidden = false;
    select.addEventListener("change", function () {  // a new page: every panel, its dates and its "today" follow the site
      var next = new URLSearchParams(location.search);
      next.set("site", select.value);
      ["from", "to", "counter", "board", "funnel"].forEach(function (k) { next.delete(k); });
      location.search = next.toString();
    });
  }

  function start(config) {
    siteSwitch(config);
    $("timezone").textContent = config.timezone ? "days in " + config.timezone : "";
    $("from").value = params.get("from") || daysBefore(config.today, 6);
    $("to").value = params.get("to") || config.today;
    $("path").value = params.get("path") || "";
    var reloadRange = function () {
      loadVisitors(); loadPages(); loadSources(); loadClients(); loadUniques(); loadEvents(); loadGoals(); loadFunnel();
    };
    ["from", "to", "path"].forEach(function (id) { $(id).addEventListener("change", reloadRange); });
    $("source-kind").addEventListener("change", loadSources);
    $("client-kind").addEventListener("change", loadClients);
    $("client-page").addEventListener("change", loadClients);
    $("funnel-name").addEventListener("change", loadFunnel);
    reloadRange();
    api("counters", {limit: 1000}).then(function (data) {  // the first page: the list is paged (data.next)
      var names = data.counters.slice().sort();
      if (params.get("counter") && names.indexOf(params.get("counter")) < 0) names.unshift(params.get("counter"));
      fillSelect($("counter-name"), names, params.get("counter"));
      fillSelect($("counter-precision"), data.precisions, params.get("precision") || 60);
      $("counter-name").addEventListener("change", loadCounter);
      $("counter-precision").addEventListener("change", loadCounter);
      var tick = function () { loadCounter().then(function () { setTimeout(tick, REFRESH); }); };
      tick();
    }).catch(function (e) { failed("counter", e); });
    $("board").addEventListener("change", loadBoard);
    var boardTick = function () { loadBoard().then(function () { setTimeout(boardTick, REFRESH); }); };
    boardTick();  // the board list first (loadBoard asks for it while none is chosen)
    var nowTick = function () { loadNow().then(function () { setTimeout(nowTick, REFRESH); }); };
    nowTick();
    var healthTick = function () { loadHealth().then(function () { setTimeout(healthTick, Math.max(REFRESH, 2000)); }); };
    healthTick();
  }

  init();
})();
