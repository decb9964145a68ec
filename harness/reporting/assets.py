"""The style sheet and script every report page inlines (no network: nothing is fetched).

The script renders on demand: a document's text, chunk boundaries and evidence spans are
stored as JSON in ``<script type="application/json" class="doc">`` blocks and drawn only
when the document is opened, so a large corpus costs the browser a parse of inert text.
"""

CSS = """
:root { --ev: #ffe58a; --ev-border: #d4a300; --big: #d62728; --c0: #e8f1fb; --c1: #f3f3f3; --ov: #d9ead3; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; color: #222; background: #fff; }
header { padding: 14px 22px; background: #24323f; color: #fff; }
header h1 { margin: 0 0 4px; font-size: 20px; }
header .sub { color: #c8d3dc; font-size: 13px; }
header a { color: #9fd0ff; }
nav { position: sticky; top: 0; z-index: 5; background: #f6f8fa; border-bottom: 1px solid #ddd; padding: 6px 22px; }
nav a { margin-right: 16px; color: #0b5cad; text-decoration: none; }
main { padding: 8px 22px 40px; }
section { margin: 18px 0 26px; }
h2 { font-size: 17px; border-bottom: 1px solid #e3e3e3; padding-bottom: 4px; }
iframe.embedded-report { width: 100%; height: 85vh; border: 1px solid #ccc; }
dl.reasons { display: grid; grid-template-columns: max-content 1fr; gap: 2px 10px; margin: 6px 0; }
dl.reasons dd { margin: 0; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; }
.card { border: 1px solid #d8dee4; border-radius: 6px; padding: 8px 12px; min-width: 132px; background: #fbfcfd; }
.card .name { font-size: 12px; color: #57606a; }
.card .value { font-size: 22px; font-weight: 600; }
.card .ci { font-size: 11px; color: #57606a; }
.charts { display: flex; flex-wrap: wrap; gap: 14px; }
.charts figure { margin: 0; border: 1px solid #eee; border-radius: 6px; padding: 4px; }
.charts figcaption { font-size: 12px; color: #57606a; padding: 2px 6px; }
.charts svg { width: 520px; height: auto; display: block; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border-bottom: 1px solid #eaeaea; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f6f8fa; position: sticky; top: 33px; }
th.sortable { cursor: pointer; user-select: none; }
th.sortable::after { content: " \\2195"; color: #999; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.best td { background: #eefbea; font-weight: 600; }
.viewer { display: flex; gap: 12px; align-items: flex-start; }
.doclist { width: 260px; max-height: 78vh; overflow: auto; border: 1px solid #e3e3e3; border-radius: 6px; font-size: 13px; flex: none; }
.doclist button { display: block; width: 100%; text-align: left; border: 0; border-bottom: 1px solid #f0f0f0; background: none; padding: 4px 8px; cursor: pointer; }
.doclist button.active { background: #dbeafe; }
.doclist .meta { color: #777; font-size: 11px; }
.docpane { flex: 1; min-width: 0; }
.doctext { white-space: pre-wrap; font: 13px/1.6 ui-monospace, SFMono-Regular, Menlo, monospace; border: 1px solid #e3e3e3; border-radius: 6px; padding: 10px; max-height: 78vh; overflow: auto; }
.seg.c0 { background: var(--c0); } .seg.c1 { background: var(--c1); }
.seg.ov { background: var(--ov); }
.seg.gap { background: none; color: #999; }
.seg.big { box-shadow: inset 0 -2px 0 var(--big); }
.seg.ev { background: var(--ev); outline: 1px solid var(--ev-border); }
.seg.focus { background: #ffb347; }
.cut { color: #fff; background: #0b5cad; font: 10px/1 system-ui, sans-serif; padding: 1px 3px; border-radius: 3px; margin: 0 2px; vertical-align: 2px; white-space: nowrap; }
.cut.big { background: var(--big); }
.legend span { display: inline-block; padding: 0 6px; margin-right: 8px; border-radius: 3px; font-size: 12px; }
.pair { display: grid; grid-template-columns: 1fr 1fr; gap: 12px; }
.pair h3 { font-size: 14px; margin: 4px 0; }
.qtable tr.q { cursor: pointer; }
.qtable tr.q:hover td { background: #f5f9ff; }
.qtable tr.q.open td { background: #dbeafe; }
.reason { font-size: 11px; padding: 1px 6px; border-radius: 8px; background: #eee; white-space: nowrap; }
.reason.boundary_split { background: #fde2c8; } .reason.rank_miss { background: #e6e0f8; }
.reason.truncated { background: #f9d0d0; } .reason.not_covered { background: #d0d0d0; } .reason.hit { background: #d3f3d3; }
.qdetail { border: 1px solid #d8dee4; border-radius: 6px; padding: 8px 12px; margin: 6px 0 10px; background: #fcfcfd; }
.hit { border-left: 4px solid #ccc; padding: 2px 8px; margin: 4px 0; }
.hit.overlaps { border-left-color: #2ca02c; }
.hit .snip { white-space: pre-wrap; font: 12px/1.45 ui-monospace, monospace; color: #333; max-height: 8.5em; overflow: hidden; }
.muted { color: #777; font-size: 12px; }
.controls { margin: 6px 0; }
button.link { border: 0; background: none; color: #0b5cad; cursor: pointer; padding: 0; text-decoration: underline; font: inherit; }
"""

JS = r"""
(function () {
  "use strict";
  var cache = {};
  function docBlock(i) { return document.getElementById("doc-" + i); }
  function docData(i) {
    if (!(i in cache)) { cache[i] = JSON.parse(docBlock(i).textContent); }
    return cache[i];
  }
  window.harnessDocData = docData;
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  // Draw document i with the chunk set of run r into container: segments between every
  // chunk and evidence boundary, a numbered marker where each chunk starts.
  function renderDoc(i, r, container, focus) {
    var d = docData(i), text = d.text, cuts = d.cuts[r] || [], ev = d.ev || [];
    var points = {0: 1}; points[text.length] = 1;
    cuts.forEach(function (c) { points[c[0]] = 1; points[c[1]] = 1; });
    ev.forEach(function (e) { points[e[0]] = 1; points[e[1]] = 1; });
    var xs = Object.keys(points).map(Number).sort(function (a, b) { return a - b; });
    var starts = {};
    cuts.forEach(function (c) { (starts[c[0]] = starts[c[0]] || []).push(c); });
    var frag = document.createDocumentFragment();
    var active = [], activeEv = [];
    for (var n = 0; n + 1 < xs.length; n++) {
      var a = xs[n], b = xs[n + 1];
      active = active.filter(function (c) { return c[1] > a; });
      (starts[a] || []).forEach(function (c) {
        active.push(c);
        var m = el("span", "cut" + (c[3] ? " big" : ""), String(c[2]));
        m.title = "chunk " + c[2] + (c[3] ? " (over the model window: the model reads only its start)" : "");
        frag.appendChild(m);
      });
      activeEv = ev.filter(function (e) { return e[0] <= a && e[1] >= b; });
      var cls = "seg";
      if (!active.length) cls += " gap";
      else if (active.length > 1) cls += " ov";
      else cls += " c" + (active[0][2] % 2);
      if (active.some(function (c) { return c[3]; })) cls += " big";
      var s = el("span", cls, text.slice(a, b));
      if (active.length) s.setAttribute("data-chunk", active.map(function (c) { return c[2]; }).join(" "));
      if (activeEv.length) {
        s.className += " ev";
        s.setAttribute("data-ev", activeEv.map(function (e) { return e[0] + "-" + e[1]; }).join(" "));
        s.title = "evidence of " + activeEv.map(function (e) { return e[2].join(", "); }).join("; ");
        if (focus && activeEv.some(function (e) { return e[0] === focus[0] && e[1] === focus[1]; })) s.className += " focus";
      }
      frag.appendChild(s);
    }
    container.textContent = "";
    container.appendChild(frag);
  }
  window.harnessRenderDoc = renderDoc;
  function openDoc(i, focus) {
    document.querySelectorAll(".doclist button").forEach(function (b) { b.classList.toggle("active", b.getAttribute("data-doc") === String(i)); });
    document.querySelectorAll("[data-docview]").forEach(function (pane) {
      var r = Number(pane.getAttribute("data-run"));
      renderDoc(i, r, pane, focus);
      var title = document.getElementById(pane.getAttribute("data-title"));
      if (title) title.textContent = docData(i).id;
    });
    document.body.setAttribute("data-open-doc", String(i));
    if (focus) {
      var f = document.querySelector("[data-docview] .seg.focus");
      if (f) f.scrollIntoView({block: "center"});
    }
  }
  window.harnessOpenDoc = openDoc;
  document.addEventListener("click", function (e) {
    var t = e.target.closest("[data-open]");
    if (t) {
      var focus = t.hasAttribute("data-focus") ? t.getAttribute("data-focus").split("-").map(Number) : null;
      openDoc(Number(t.getAttribute("data-open")), focus);
      if (t.hasAttribute("data-focus")) document.getElementById("documents").scrollIntoView();
      return;
    }
    var q = e.target.closest("tr.q");
    if (q) { toggleQuery(q); return; }
    var th = e.target.closest("th.sortable");
    if (th) sortBy(th);
  });
  var queryData = null;
  function queries() {
    if (queryData === null) { var b = document.getElementById("query-data"); queryData = b ? JSON.parse(b.textContent) : {}; }
    return queryData;
  }
  function snippet(hit) {
    var d = docData(hit.d), parts = hit.s.map(function (s) { return d.text.slice(s[0], s[1]); });
    var t = parts.join(" \u2026 ");
    return t.length > 600 ? t.slice(0, 600) + " \u2026" : t;
  }
  function toggleQuery(row) {
    var next = row.nextElementSibling;
    if (next && next.classList.contains("qdetail-row")) { next.remove(); row.classList.remove("open"); return; }
    row.classList.add("open");
    var info = queries()[row.getAttribute("data-query")];
    var tr = el("tr", "qdetail-row"), td = el("td");
    td.colSpan = row.children.length;
    var box = el("div", "qdetail");
    (info.runs || [info]).forEach(function (run, r) {
      if (info.runs) box.appendChild(el("h3", null, run.label));
      var evs = el("div");
      evs.appendChild(el("b", null, "evidence: "));
      info.ev.forEach(function (e) {
        var b = el("button", "link", info.docs[e[0]] + " [" + e[1] + ", " + e[2] + ")");
        b.setAttribute("data-open", e[0]); b.setAttribute("data-focus", e[1] + "-" + e[2]);
        evs.appendChild(b); evs.appendChild(document.createTextNode("  "));
        evs.appendChild(el("div", "hit snip", "\u201c" + docData(e[0]).text.slice(e[1], e[2]).slice(0, 400) + "\u201d"));
      });
      if (r === 0) box.appendChild(evs);
      var list = el("div");
      list.appendChild(el("b", null, "top-" + run.hits.length + " retrieved (green: overlaps the evidence)"));
      run.hits.forEach(function (h, n) {
        var div = el("div", "hit" + (h.o > 0 ? " overlaps" : ""));
        div.setAttribute("data-rank", String(n + 1));
        div.setAttribute("data-overlap", String(h.o));
        var head = el("div", "muted", "#" + (n + 1) + "  " + h.id + "  score " + (h.sc === null ? "\u2013" : h.sc.toFixed(4)) + "  " + (h.o > 0 ? h.o + " evidence chars" : "no evidence"));
        div.appendChild(head);
        div.appendChild(el("div", "snip", snippet(h)));
        list.appendChild(div);
      });
      box.appendChild(list);
    });
    td.appendChild(box); tr.appendChild(td);
    row.parentNode.insertBefore(tr, row.nextSibling);
  }
  window.harnessToggleQuery = toggleQuery;
  function sortBy(th) {
    var table = th.closest("table"), idx = Array.prototype.indexOf.call(th.parentNode.children, th);
    var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
    var asc = th.getAttribute("data-dir") !== "asc";
    th.parentNode.querySelectorAll("th").forEach(function (h) { h.removeAttribute("data-dir"); });
    th.setAttribute("data-dir", asc ? "asc" : "desc");
    rows.sort(function (a, b) {
      var x = a.children[idx].getAttribute("data-sort") || a.children[idx].textContent;
      var y = b.children[idx].getAttribute("data-sort") || b.children[idx].textContent;
      var nx = parseFloat(x), ny = parseFloat(y), c;
      if (!isNaN(nx) && !isNaN(ny)) c = nx - ny; else c = x < y ? -1 : x > y ? 1 : 0;
      return asc ? c : -c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }
  document.addEventListener("change", function (e) {
    if (e.target.id === "misses-only") {
      var on = e.target.checked;
      document.querySelectorAll("tr.q").forEach(function (r) {
        var hide = on && r.getAttribute("data-missed") !== "1";
        r.style.display = hide ? "none" : "";
        var n = r.nextElementSibling;
        if (hide && n && n.classList.contains("qdetail-row")) { n.remove(); r.classList.remove("open"); }
      });
    }
  });
  document.addEventListener("DOMContentLoaded", function () {
    var first = document.querySelector(".doclist button");
    if (first) openDoc(Number(first.getAttribute("data-doc")));
    document.body.setAttribute("data-ready", "1");
  });
})();
"""
