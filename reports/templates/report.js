// Host table of report.html: filter by host, status and check; paginate; state in the URL hash
// (#status=FAIL&host=gpu0*&check=nvlink&page=2, or #filter=FAIL). Builds DOM with textContent
// only: no node-supplied text is ever parsed as HTML.
(function () {
  "use strict";
  var PAGE = 50;
  var data = JSON.parse(document.getElementById("hc-index").textContent);
  var S = data.statuses, hosts = data.hosts, checks = data.checks, shapes = data.shapes;
  var $ = function (id) { return document.getElementById(id); };
  var fHost = $("f-host"), fStatus = $("f-status"), fCheck = $("f-check");
  var state = { host: "", status: "", check: "", page: 1 }, matches = hosts;

  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }
  function globRegex(pattern) {
    var esc = pattern.replace(/[.+?^${}()|[\]\\]/g, "\\$&").replace(/\*/g, ".*");
    return new RegExp(pattern.indexOf("*") >= 0 ? "^" + esc + "$" : esc, "i");
  }
  function hostMatcher(text) {
    var parts = text.split(/[\s,]+/).filter(Boolean).map(globRegex);
    return parts.length ? function (name) { return parts.some(function (r) { return r.test(name); }); } : null;
  }
  function statusOk(idx) {
    if (!state.status) return true;
    if (state.status === "bad") return S[idx] !== "PASS" && S[idx] !== "SKIP";
    return S[idx] === state.status;
  }
  function apply() {
    var byHost = hostMatcher(state.host), check = state.check.toLowerCase();
    matches = hosts.filter(function (h) {
      if (byHost && !byHost(h[0])) return false;
      if (!check) return statusOk(h[1]);
      return shapes[h[5]].some(function (cs) { return checks[cs[0]].toLowerCase().indexOf(check) >= 0 && statusOk(cs[1]); });
    });
    var pages = Math.max(1, Math.ceil(matches.length / PAGE));
    state.page = Math.min(Math.max(1, state.page), pages);
    render(pages);
  }
  function row(h) {
    var tr = el("tr", null, "s-" + S[h[1]]), td = el("td", null, "host");
    if (h[7]) { var a = el("a", h[0]); a.href = "#h-" + h[0]; td.appendChild(a); } else { td.textContent = h[0]; }
    tr.appendChild(td);
    var v = el("td"); v.appendChild(el("span", S[h[1]], "st st-" + S[h[1]])); tr.appendChild(v);
    tr.appendChild(el("td", data.profiles[h[2]] + (h[3] ? " · " + h[3] : "")));
    tr.appendChild(el("td", h[4].join("/"), "num"));
    var chips = el("td", null, "chips"), bad = shapes[h[5]].filter(function (cs) { return S[cs[1]] !== "PASS" && S[cs[1]] !== "SKIP"; });
    bad.slice(0, 6).forEach(function (cs) { chips.appendChild(el("code", checks[cs[0]], "chip-" + S[cs[1]])); });
    if (bad.length > 6) chips.appendChild(el("span", "+" + (bad.length - 6) + " more", "muted"));
    tr.appendChild(chips);
    tr.appendChild(el("td", h[6]));
    return tr;
  }
  function render(pages) {
    var body = $("host-rows"), start = (state.page - 1) * PAGE, frag = document.createDocumentFragment();
    matches.slice(start, start + PAGE).forEach(function (h) { frag.appendChild(row(h)); });
    if (!matches.length) { var tr = el("tr"), td = el("td", "no host matches", "muted"); td.colSpan = 6; tr.appendChild(td); frag.appendChild(tr); }
    body.replaceChildren(frag);
    $("f-count").textContent = matches.length + " of " + hosts.length + " hosts";
    $("p-info").textContent = "page " + state.page + " of " + pages;
    $("p-prev").disabled = state.page <= 1;
    $("p-next").disabled = state.page >= pages;
    document.body.setAttribute("data-filter-matches", String(matches.length));
  }
  function toHash() {
    var parts = [];
    ["status", "host", "check"].forEach(function (k) { if (state[k]) parts.push(k + "=" + encodeURIComponent(state[k])); });
    if (state.page > 1) parts.push("page=" + state.page);
    history.replaceState(null, "", parts.length ? "#" + parts.join("&") : location.pathname + location.search);
  }
  // Host details past the first few are placeholders <template id="t-h-NAME">, replaced when their anchor
  // is followed: by the section built from its data (#hc-details, parsed on first use; the elements of
  // macros.html.j2 host_detail, text by textContent only) or, for a section only markup can show (charts),
  // by a clone of the template's content (markup the browser parsed, escaped, with the page).
  var detailsEl = $("hc-details"), details = null;
  function detailData(name) {
    if (!detailsEl) return null;
    if (details === null) details = JSON.parse(detailsEl.textContent);
    return Object.prototype.hasOwnProperty.call(details.hosts, name) ? details.hosts[name] : null;
  }
  function shared(v) { return typeof v === "number" ? details.strings[v] : v; }  // a panel text used more than once
  function add(parent, child) { parent.appendChild(typeof child === "string" ? document.createTextNode(child) : child); return child; }
  function status(s) { return el("span", s, "st st-" + s); }
  var FINDING_COLUMNS = ["status", "check", "component", "measured", "expected", "margin", "finding", "source"];
  function findingsTable(rows) {
    var table = el("table", null, "grid findings"), head = add(add(table, el("thead")), el("tr")), body = el("tbody");
    FINDING_COLUMNS.forEach(function (c) { add(head, el("th", c)); });
    rows.forEach(function (r) {  // status, check, component, measured, expected, margin, negative, [message, source, short], remedy, source
      var tr = add(body, el("tr", null, "s-" + r[0]));
      add(add(tr, el("td")), status(r[0]));
      add(add(tr, el("td")), el("code", r[1]));
      add(tr, el("td", r[2])); add(tr, el("td", r[3], "num meas")); add(tr, el("td", r[4], "exp"));
      add(tr, el("td", r[5], "num " + (r[6] ? "neg" : "")));
      var text = add(tr, el("td", null, "text")), m = r[7];
      if (m.length === 1) { if (m[0]) add(text, m[0]); }
      else { add(text, m[0] + " "); var cite = add(text, el("span", "(source: " + m[2] + ")", "cite")); cite.title = m[1]; }
      if (r[8]) add(text, el("div", "\u2192 " + r[8], "remedy"));
      add(tr, el("td", r[9], "muted src"));
    });
    add(table, body);
    return table;
  }
  function folded(summary, content) {
    var d = el("details"); add(d, el("summary", summary)); add(d, content); return d;
  }
  function panel(p) {
    var d = el("details", null, "panel"), s = add(d, el("summary", p.title + (p.note ? " " : "")));
    if (p.open) d.open = true;
    if (p.note) add(s, el("span", "\u00b7 " + p.note, "muted"));
    if (p.kind === "note") { add(d, el("p", p.note, "muted")); return d; }
    var table = add(add(d, el("div", null, "scroll")), el("table", null, p.kind === "matrix" ? "grid obs matrix" : "grid obs"));
    var head = add(add(table, el("thead")), el("tr")), body = add(table, el("tbody"));
    p.columns.forEach(function (c) { add(head, el("th", c)); });
    p.rows.forEach(function (row, i) {
      var tr = add(body, el("tr")), classes = p.classes ? p.classes[i] || [] : [];
      row.forEach(function (v, j) { add(tr, el("td", shared(v), shared(classes[j]) || "")); });
    });
    return d;
  }
  function buildDetail(name, x) {
    var a = el("article", null, "host-detail v-" + x.verdict), h = add(a, el("h3"));
    a.id = "h-" + name;
    add(h, status(x.verdict)); add(h, " " + name + " "); add(h, el("span", x.head, "muted"));
    if (x.bad) add(a, findingsTable(x.bad));
    else add(a, el("p", "No FAIL, ERROR or WARN: " + x.good_count + " checks pass.", "ok-note"));
    if (x.skipped) add(a, folded(x.skipped.length + " skipped", findingsTable(x.skipped)));
    if (x.good) add(a, folded(x.good.length + " passing", findingsTable(x.good)));
    else if (x.good_count) {
      var p = el("p", null, "muted");
      (x.good_summary || []).forEach(function (cn, i, all) {
        add(p, el("code", cn[0])); add(p, " \u00d7" + cn[1] + (i < all.length - 1 ? ", " : ""));
      });
      add(p, " (every finding is in findings.table.json.gz)");
      add(a, folded(x.good_count + " passing", p));
    }
    (x.panels || []).forEach(function (p) { add(a, panel(p)); });
    (x.raw || []).forEach(function (r) {
      var d = add(a, el("details", null, "raw")), s = add(d, el("summary", "raw output: "));
      add(s, el("code", r[0])); add(d, el("pre", r[1]));
    });
    return a;
  }
  function reveal(id) {
    var t = document.getElementById("t-" + id), x = t ? detailData(id.slice(2)) : null;
    if (x) t.parentNode.replaceChild(buildDetail(id.slice(2), x), t);
    else if (t && t.content) t.parentNode.replaceChild(document.importNode(t.content, true), t);
    return document.getElementById(id);
  }
  function toAnchor() {
    var h = decodeURIComponent(location.hash.slice(1));
    if (h.indexOf("h-") !== 0 || document.getElementById(h)) return;
    var target = reveal(h);
    if (target) target.scrollIntoView();
  }
  function fromHash() {
    var h = location.hash.slice(1);
    if (!h || h.indexOf("=") < 0) return false;  // a plain anchor such as #h-gpu001
    var next = { host: "", status: "", check: "", page: 1 };
    h.split("&").forEach(function (kv) {
      var i = kv.indexOf("="), k = kv.slice(0, i), v = decodeURIComponent(kv.slice(i + 1));
      if (k === "filter") { if (S.indexOf(v.toUpperCase()) >= 0 || v === "bad") next.status = v === "bad" ? v : v.toUpperCase(); else next.host = v; }
      else if (k === "status") next.status = S.indexOf(v.toUpperCase()) >= 0 ? v.toUpperCase() : (v === "bad" ? v : "");
      else if (k === "host" || k === "check") next[k] = v;
      else if (k === "page") next.page = parseInt(v, 10) || 1;
    });
    state = next;
    fHost.value = state.host; fStatus.value = state.status; fCheck.value = state.check;
    return true;
  }
  var timer = null;
  function onInput() {
    clearTimeout(timer);
    timer = setTimeout(function () {
      state = { host: fHost.value.trim(), status: fStatus.value, check: fCheck.value.trim(), page: 1 };
      toHash(); apply();
    }, 120);
  }
  fHost.addEventListener("input", onInput); fCheck.addEventListener("input", onInput);
  fStatus.addEventListener("change", onInput);
  $("filter").addEventListener("submit", function (e) { e.preventDefault(); });
  $("p-prev").addEventListener("click", function () { state.page -= 1; toHash(); apply(); });
  $("p-next").addEventListener("click", function () { state.page += 1; toHash(); apply(); });
  window.addEventListener("hashchange", function () {
    if (fromHash()) { apply(); $("hosts").scrollIntoView(); } else { toAnchor(); }
  });
  // Printing (or saving as PDF) shows everything: every host's details, the folded sections open.
  window.addEventListener("beforeprint", function () {
    document.querySelectorAll("template.host-detail").forEach(function (t) { reveal(t.id.slice(2)); });
    document.querySelectorAll("details").forEach(function (d) { d.open = true; });
  });
  fromHash();
  apply();
  toAnchor();
})();
