// rtm-trace's HTML report: tabs, sortable tables and drill-down, from the data the
// page carries (no network, no library). Every string is inserted as text, never as
// markup. When done, the body's dataset says it is rendered; errors are listed there.
"use strict";
(function () {
  var errors = [];
  window.addEventListener("error", function (e) {
    errors.push(String(e.message));
    document.body.dataset.errors = errors.join(" | ");
  });
  var data = JSON.parse(document.getElementById("rtm-data").textContent);

  function el(tag, attrs, children) {
    var e = document.createElement(tag);
    if (attrs) for (var k in attrs) e.setAttribute(k, attrs[k]);
    (children || []).forEach(function (c) {
      e.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    });
    return e;
  }
  function ns(v) {
    if (v === null || v === undefined) return "-";
    if (v < 1e3) return Math.round(v) + " ns";
    if (v < 1e6) return (v / 1e3).toFixed(1) + " us";
    if (v < 1e9) return (v / 1e6).toFixed(2) + " ms";
    return (v / 1e9).toFixed(3) + " s";
  }
  function num(v) { return v === null || v === undefined ? "-" : Number(v).toLocaleString("en"); }

  // Tabs.
  var buttons = document.querySelectorAll("nav button");
  buttons.forEach(function (b) {
    b.addEventListener("click", function () {
      buttons.forEach(function (x) { x.classList.remove("on"); });
      document.querySelectorAll("section").forEach(function (s) { s.classList.remove("on"); });
      b.classList.add("on");
      document.getElementById(b.dataset.tab).classList.add("on");
    });
  });

  // A sortable table: cols = [{title, key, fmt}], rows = objects; detail(row) -> node.
  function sortable(container, cols, rows, sortKey, detail) {
    var table = el("table");
    var head = el("tr");
    var state = { key: sortKey, asc: false };
    cols.forEach(function (c) {
      var th = el("th", { "data-key": c.key }, [c.title]);
      th.addEventListener("click", function () {
        state.asc = state.key === c.key ? !state.asc : false;
        state.key = c.key;
        draw();
      });
      head.appendChild(th);
    });
    table.appendChild(el("thead", null, [head]));
    var body = el("tbody");
    table.appendChild(body);
    function value(r, k) { var v = r[k]; return v === null || v === undefined ? -1 : v; }
    function draw() {
      head.querySelectorAll("th").forEach(function (th) {
        th.classList.toggle("sorted", th.dataset.key === state.key);
        th.classList.toggle("asc", th.dataset.key === state.key && state.asc);
      });
      rows.sort(function (a, b) {
        var x = value(a, state.key), y = value(b, state.key);
        var d = typeof x === "string" ? String(x).localeCompare(String(y)) : x - y;
        return state.asc ? d : -d;
      });
      body.textContent = "";
      rows.forEach(function (r) {
        var tr = el("tr", detail ? { "class": "pick" } : null,
          cols.map(function (c) { return el("td", null, [c.fmt ? c.fmt(r[c.key]) : String(r[c.key])]); }));
        body.appendChild(tr);
        if (detail) {
          tr.addEventListener("click", function () {
            var next = tr.nextSibling;
            if (next && next.classList.contains("detail")) {
              next.remove();
              tr.classList.remove("open");
              return;
            }
            tr.classList.add("open");
            var td = el("td", { colspan: String(cols.length) }, [detail(r)]);
            body.insertBefore(el("tr", { "class": "detail" }, [td]), tr.nextSibling);
          });
        }
      });
    }
    draw();
    container.appendChild(table);
  }

  var threadName = {};
  data.threads.forEach(function (t) {
    threadName[t.pid + "/" + t.tid] = t.tid + (t.name ? " " + t.name : "");
  });
  function who(pid, tid) { return threadName[pid + "/" + tid] || String(tid); }

  // Locks -> threads -> wakers.
  var lockCols = [
    { title: "object", key: "label" },
    { title: "pid", key: "pid" },
    { title: "acquired", key: "acquisitions", fmt: num },
    { title: "contended", key: "contended", fmt: num },
    { title: "total wait", key: "wait_total", fmt: ns },
    { title: "avg wait", key: "wait_avg", fmt: ns },
    { title: "p99 wait", key: "wait_p99", fmt: ns },
    { title: "max wait", key: "wait_max", fmt: ns },
    { title: "avg hold", key: "hold_avg", fmt: ns },
    { title: "max hold", key: "hold_max", fmt: ns },
    { title: "threads", key: "threads", fmt: num }
  ];
  sortable(document.getElementById("locks-table"), lockCols, data.objects, "wait_total", function (o) {
    var box = el("div");
    var users = data.edges.filter(function (e) { return e.pid === o.pid && e.object === o.addr; });
    box.appendChild(el("h2", null, ["Threads using " + o.label]));
    sortable(box, [
      { title: "thread", key: "thread" },
      { title: "role", key: "role" },
      { title: "acquired", key: "acquisitions", fmt: num },
      { title: "contended", key: "contended", fmt: num },
      { title: "total wait", key: "wait_total", fmt: ns },
      { title: "max wait", key: "wait_max", fmt: ns },
      { title: "avg hold", key: "hold_avg", fmt: ns }
    ], users.map(function (e) {
      return { thread: who(e.pid, e.tid), role: e.role, acquisitions: e.acquisitions, contended: e.contended,
               wait_total: e.wait_total, wait_max: e.wait_max, hold_avg: e.hold_avg };
    }), "wait_total");
    var wakers = data.waits_for.filter(function (w) { return w.pid === o.pid && w.object === o.addr; });
    box.appendChild(el("h2", null, ["Who woke the waiters"]));
    if (!wakers.length) box.appendChild(el("p", { "class": "note" }, ["No wake was attributed on this object."]));
    else sortable(box, [
      { title: "waiter", key: "waiter" },
      { title: "woken by", key: "waker" },
      { title: "waits", key: "count", fmt: num },
      { title: "total wait", key: "wait_total", fmt: ns },
      { title: "max wait", key: "wait_max", fmt: ns }
    ], wakers.map(function (w) {
      return { waiter: who(w.pid, w.waiter), waker: w.outside ? "a process not traced (" + w.waker_pid + ")" : who(w.waker_pid, w.waker),
               count: w.count, wait_total: w.wait_total, wait_max: w.wait_max };
    }), "wait_total");
    return box;
  });

  sortable(document.getElementById("threads-table"), [
    { title: "thread", key: "label" },
    { title: "pid", key: "pid" },
    { title: "acquired", key: "acquisitions", fmt: num },
    { title: "contended", key: "contended", fmt: num },
    { title: "total wait", key: "wait_total", fmt: ns },
    { title: "share waiting", key: "wait_share", fmt: function (v) { return (v * 100).toFixed(1) + "%"; } },
    { title: "held", key: "hold_total", fmt: ns }
  ], data.threads.map(function (t) {
    return { label: who(t.pid, t.tid), pid: t.pid, acquisitions: t.acquisitions, contended: t.contended,
             wait_total: t.wait_total, wait_share: t.wait_share, hold_total: t.hold_total };
  }), "wait_total");

  // An analysis's tab may carry its table's rows (data-rows): the MPI collectives.
  var collectives = document.getElementById("collectives-table");
  var collectiveRows = collectives ? JSON.parse(collectives.dataset.rows) : [];
  if (collectiveRows.length) {
    sortable(collectives, [
      { title: "collective", key: "function" },
      { title: "ranks", key: "ranks", fmt: num },
      { title: "instances", key: "instances", fmt: num },
      { title: "time", key: "time_ns", fmt: ns },
      { title: "arrival spread avg", key: "mean_spread_ns", fmt: ns },
      { title: "max", key: "max_spread_ns", fmt: ns }
    ], collectiveRows, "time_ns");
  }
  // A tab named in the address (report.html#tab=locks) opens first.
  var wanted = location.hash.replace(/^#(tab=)?/, "");
  buttons.forEach(function (b) { if (b.dataset.tab === wanted) b.click(); });
  // A row named in the address (?open=LABEL) opens its drill-down.
  var open = new URLSearchParams(location.search).get("open");
  if (open) document.querySelectorAll("#locks-table tr.pick").forEach(function (tr) {
    if (tr.firstChild.textContent === open) tr.click();
  });
  document.body.dataset.rendered = "1";
})();
