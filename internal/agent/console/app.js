// lockgov console: reads the agent's JSON APIs every few seconds and renders
// them. No framework, no CDN; data goes into the page as text, never HTML.
"use strict";
(function () {
  var REFRESH_MS = 3000;
  var state = { findings: [], locks: [], instances: [], remediation: false, scannedAt: null, leader: false, errors: [] };
  var sevRank = { critical: 0, warning: 1, info: 2 };

  function $(id) { return document.getElementById(id); }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function dur(s) {
    if (s === undefined || s === null) return "";
    if (s < 0) return "none";
    if (s < 1) return Math.round(s * 1000) + "ms";
    if (s < 120) return s.toFixed(1) + "s";
    if (s < 7200) return Math.round(s / 60) + "m";
    return (s / 3600).toFixed(1) + "h";
  }
  function holderText(h) {
    if (!h) return "";
    if (h.foreign) return "foreign value (not written by lockgov)";
    var s = (h.service || "?") + "/" + (h.instance || "?");
    if (h.host) s += " on " + h.host;
    if (h.pid) s += " pid " + h.pid;
    if (h.heartbeat) s += " (" + h.heartbeat + ")";
    return s;
  }
  function filters() {
    return { store: $("f-store").value, service: $("f-service").value, pattern: $("f-pattern").value };
  }
  function keep(f, store, service, pattern) {
    if (f.store && store !== f.store) return false;
    if (f.service && service !== f.service) return false;
    if (f.pattern && pattern !== undefined && pattern !== f.pattern) return false;
    return true;
  }
  function fillSelect(id, values) {
    var sel = $(id), cur = sel.value, seen = {};
    values.forEach(function (v) { if (v) seen[v] = true; });
    var list = Object.keys(seen).sort();
    if (cur && !seen[cur]) list.push(cur);
    while (sel.options.length > 1) sel.remove(1);
    list.forEach(function (v) { var o = el("option", null, v); o.value = v; sel.appendChild(o); });
    sel.value = cur;
  }

  // keyOf returns how the console shows the key of a finding or lock, and
  // the query parameter that names it exactly. key_base64, when the API
  // gives it, holds the key's bytes: the key is not UTF-8, and "key" has
  // U+FFFD in place of its bad bytes, which may spell another lock's key.
  // Such a key is shown with \xNN for each byte outside printable ASCII, as
  // the Actions' $'...' quoting writes it.
  function keyOf(x) {
    if (!x.key_base64) return { text: x.key, param: "key=" + encodeURIComponent(x.key) };
    var bin = atob(x.key_base64), text = "";
    for (var i = 0; i < bin.length; i++) {
      var c = bin.charCodeAt(i);
      if (c === 0x5c) text += "\\\\";
      else if (c >= 0x20 && c < 0x7f) text += bin.charAt(i);
      else text += "\\x" + (c < 16 ? "0" : "") + c.toString(16);
    }
    return { text: text, param: "key_base64=" + encodeURIComponent(x.key_base64) };
  }

  // remediateButton deletes the lock this page shows: it sends the
  // version the API gave with it as If-Match, so that a lock that replaced
  // it since (another holder, another application's new lock) is kept: the
  // agent answers 412. (A record from an agent without versions has none:
  // the delete then compares with the agent's own read only.)
  function remediateButton(store, k, version) {
    var b = el("button", "remediate", "delete immortal lock");
    b.type = "button";
    b.onclick = function () {
      if (!window.confirm("Delete the immortal lock " + k.text + " on " + store + "?\nThe agent deletes it only if it is still the lock shown here, still has no TTL, and does not change meanwhile.")) return;
      var token = sessionStorage.getItem("lockgov-token") || window.prompt("Remediation token of this agent:");
      if (!token) return;
      var headers = { "Authorization": "Bearer " + token };
      if (version) headers["If-Match"] = "\"" + version + "\"";
      fetch("/api/v1/locks?" + k.param + "&store=" + encodeURIComponent(store), {
        method: "DELETE", headers: headers
      }).then(function (r) {
        return r.json().then(function (body) {
          if (r.ok) { sessionStorage.setItem("lockgov-token", token); window.alert("Deleted " + k.text); refresh(); return; }
          if (r.status === 410) { window.alert(body.error); refresh(); return; }
          if (r.status === 412) {
            sessionStorage.setItem("lockgov-token", token);
            window.alert("Not deleted: the lock " + k.text + " changed since this page showed it.\n" + body.error + "\nLook at it again once the page shows it as it is now (after the agent's next scan) before deleting it.");
            refresh();
            return;
          }
          if (r.status === 401) sessionStorage.removeItem("lockgov-token");
          window.alert("Not deleted: " + (body.error || r.status));
        });
      }).catch(function (e) { window.alert("Not deleted: " + e); });
    };
    return b;
  }

  function renderFindings(f) {
    var box = $("findings"), list = state.findings.filter(function (x) {
      return keep(f, x.store, x.holder && x.holder.service, x.key_pattern || "");
    });
    list.sort(function (a, b) { return (sevRank[a.severity] - sevRank[b.severity]) || (a.kind < b.kind ? -1 : a.kind > b.kind ? 1 : 0); });
    $("n-findings").textContent = "(" + list.length + ")";
    var sum = $("summary"), counts = {};
    sum.textContent = "";
    list.forEach(function (x) { counts[x.kind] = (counts[x.kind] || 0) + 1; });
    Object.keys(counts).sort().forEach(function (k) { sum.appendChild(el("span", "chip", k + " " + counts[k])); });
    box.textContent = "";
    if (list.length === 0) { box.appendChild(el("p", "muted", "No findings.")); }
    list.forEach(function (x) {
      var d = el("div", "finding " + x.severity);
      d.setAttribute("data-kind", x.kind);
      var head = el("div", "head");
      head.appendChild(el("span", "sev", x.severity));
      head.appendChild(el("span", "kind", x.kind));
      if (x.key) head.appendChild(el("code", null, keyOf(x).text));
      if (x.key_pattern) head.appendChild(el("span", "muted", x.key_pattern));
      head.appendChild(el("span", "muted", x.store));
      if (x.age_seconds) head.appendChild(el("span", "muted", "age " + dur(x.age_seconds)));
      // Kept from the last scan its detector completed (a store too slow
      // for the scan timeout): it may be over.
      if (x.stale) head.appendChild(el("span", "chip", "stale: detector last completed " + new Date(x.detected_at).toLocaleString()));
      d.appendChild(head);
      if (x.holder) d.appendChild(el("div", "muted", "holder: " + holderText(x.holder)));
      if (x.detail) d.appendChild(el("div", null, x.detail));
      if (x.action) { var a = el("div", "action"); a.appendChild(el("b", null, "Action: ")); a.appendChild(document.createTextNode(x.action)); d.appendChild(a); }
      if (state.remediation && x.kind === "immortal" && x.key) d.appendChild(remediateButton(x.store, keyOf(x), x.version));
      box.appendChild(d);
    });
    renderDeadlocks(list);
  }

  // The deadlock detail ends with "A waits for K held by B; ...": one step
  // of the wait-for cycle each.
  function renderDeadlocks(list) {
    var dls = list.filter(function (x) { return x.kind === "deadlock"; });
    $("s-deadlocks").hidden = dls.length === 0;
    var box = $("deadlocks");
    box.textContent = "";
    dls.forEach(function (x) {
      var i = x.detail.indexOf(": ");
      var steps = i < 0 ? [x.detail] : x.detail.slice(i + 2).split("; ");
      var ul = el("ul", "cycle");
      steps.forEach(function (s) {
        var m = /^(.*) waits for (.*) held by (.*)$/.exec(s), li = el("li");
        if (m) {
          li.appendChild(el("b", null, m[1]));
          li.appendChild(el("span", "arrow", "→ waits for"));
          li.appendChild(el("code", null, m[2]));
          li.appendChild(el("span", "arrow", "→ held by"));
          li.appendChild(el("b", null, m[3]));
        } else { li.textContent = s; }
        ul.appendChild(li);
      });
      box.appendChild(ul);
    });
  }

  function cell(tr, text, cls) { var td = el("td", cls, text); tr.appendChild(td); return td; }

  function renderLocks(f) {
    var tb = $("locks").tBodies[0], list = state.locks.filter(function (l) {
      return keep(f, l.store, l.holder && l.holder.service, l.key_pattern || "");
    });
    $("n-locks").textContent = "(" + list.length + (state.locksTruncated ? "+, truncated" : "") + ")";
    tb.textContent = "";
    list.forEach(function (l) {
      var tr = el("tr");
      cell(tr).appendChild(el("code", null, keyOf(l).text));
      cell(tr, l.key_pattern);
      cell(tr, holderText(l.holder));
      cell(tr, l.age_seconds ? dur(l.age_seconds) : "", "num");
      cell(tr, l.immortal ? "none (immortal)" : dur(l.ttl_seconds), l.immortal ? "num immortal" : "num");
      cell(tr, l.fence || "", "num");
      cell(tr, l.store, "muted");
      var act = cell(tr, "");
      if (state.remediation && l.immortal) act.appendChild(remediateButton(l.store, keyOf(l), l.version));
      tb.appendChild(tr);
    });
    if (list.length === 0) { var tr = el("tr"); var td = cell(tr, "No locks held.", "muted"); td.colSpan = 8; tb.appendChild(tr); }
  }

  function renderInstances(f) {
    var tb = $("instances").tBodies[0], list = state.instances.filter(function (i) { return keep(f, i.store, i.service); });
    list.sort(function (a, b) { return a.service < b.service ? -1 : a.service > b.service ? 1 : (a.instance < b.instance ? -1 : 1); });
    $("n-instances").textContent = "(" + list.length + ")";
    tb.textContent = "";
    list.forEach(function (i) {
      var tr = el("tr");
      cell(tr, i.instance);
      cell(tr, i.service);
      cell(tr, i.tier || "unknown", "tier-" + (i.tier || "none"));
      var off = i.clock_offset_seconds;
      cell(tr, off === undefined || off === null ? "" : (off >= 0 ? "+" : "") + Math.round(off * 1000) + " ms", "num");
      cell(tr, i.fallback_locks ? i.held_locks + " (" + i.fallback_locks + " process-local)" : i.held_locks, "num");
      cell(tr, i.waiting, "num");
      cell(tr, (i.worker_ids || []).map(function (w) { return w.service + "#" + w.id; }).join(", "));
      cell(tr, i.store, "muted");
      tb.appendChild(tr);
    });
    if (list.length === 0) { var tr = el("tr"); var td = cell(tr, "No heartbeats.", "muted"); td.colSpan = 8; tb.appendChild(tr); }
    renderWorkerIDs(list);
  }

  function renderWorkerIDs(list) {
    var by = {};
    list.forEach(function (i) {
      (i.worker_ids || []).forEach(function (w) {
        by[w.service] = by[w.service] || {};
        (by[w.service][w.id] = by[w.service][w.id] || []).push(i.instance);
      });
    });
    var box = $("workerids");
    box.textContent = "";
    var services = Object.keys(by).sort();
    if (services.length === 0) { box.appendChild(el("p", "muted", "No WorkerIDs reported.")); return; }
    services.forEach(function (s) {
      box.appendChild(el("h3", null, s));
      var ul = el("ul");
      Object.keys(by[s]).sort(function (a, b) { return a - b; }).forEach(function (id) {
        var who = by[s][id], li = el("li");
        li.appendChild(el("b", null, "#" + id + " "));
        li.appendChild(document.createTextNode(who.join(", ")));
        if (who.length > 1) li.appendChild(el("span", "sev critical", " duplicate"));
        ul.appendChild(li);
      });
      box.appendChild(ul);
    });
  }

  function render() {
    var stores = [], services = [], patterns = [];
    state.findings.forEach(function (x) { stores.push(x.store); if (x.holder) services.push(x.holder.service); patterns.push(x.key_pattern); });
    state.locks.forEach(function (l) { stores.push(l.store); if (l.holder) services.push(l.holder.service); patterns.push(l.key_pattern); });
    state.instances.forEach(function (i) { stores.push(i.store); services.push(i.service); });
    fillSelect("f-store", stores); fillSelect("f-service", services); fillSelect("f-pattern", patterns);
    var f = filters();
    renderFindings(f); renderLocks(f); renderInstances(f);
    var st = state.scannedAt ? "scanned " + new Date(state.scannedAt).toLocaleTimeString() : "no scan yet";
    st += state.leader ? " · leader" : " · follower";
    if (state.remediation) st += " · remediation on";
    if (state.errors.length) st += " · " + state.errors.length + " scan error(s): " + state.errors.join("; ");
    $("status").textContent = st;
  }

  function getJSON(path) {
    return fetch(path, { cache: "no-store" }).then(function (r) {
      if (!r.ok) throw new Error(path + ": HTTP " + r.status);
      return r.json();
    });
  }

  function refresh() {
    return Promise.all([getJSON("/api/v1/findings"), getJSON("/api/v1/locks"), getJSON("/api/v1/instances")]).then(function (rs) {
      state.findings = rs[0].findings || [];
      state.remediation = !!rs[0].remediation;
      state.scannedAt = rs[0].scanned_at;
      state.leader = rs[0].leader;
      state.errors = rs[0].errors || [];
      state.locks = rs[1].locks || [];
      state.locksTruncated = rs[1].truncated;
      state.instances = rs[2].instances || [];
      render();
    }).catch(function (e) { $("status").textContent = "agent unreachable: " + e.message; });
  }

  ["f-store", "f-service", "f-pattern"].forEach(function (id) { $(id).addEventListener("change", render); });
  refresh();
  setInterval(refresh, REFRESH_MS);
})();
