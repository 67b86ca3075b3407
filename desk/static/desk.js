// Signoff desk: countdowns, the live queue and live outcomes (SSE), the args editor (a form from
// the tool's schema over a JSON editor) with an RFC 6902 patch preview, a before/after diff and a
// parameter-schema check, keyboard shortcuts, passkey registration, and each decision signed with
// the reviewer's passkey over what this page shows (RFC 8785 + WebCrypto SHA-256).
// No dependencies. Everything that came from an agent is inserted with textContent, never innerHTML.
"use strict";

(function () {
  // -- time ------------------------------------------------------------------------------
  function human(s) {
    s = Math.max(0, Math.floor(s));
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
    return Math.floor(s / 86400) + "d " + Math.floor((s % 86400) / 3600) + "h";
  }
  function tick() {
    var now = Date.now();
    document.querySelectorAll("[data-deadline]").forEach(function (el) {
      var left = (Date.parse(el.getAttribute("data-deadline")) - now) / 1000;
      el.textContent = left <= 0 ? "expired" : human(left) + " left";
      el.classList.toggle("gone", left <= 0);
      el.classList.toggle("soon", left > 0 && left < 300);
    });
    document.querySelectorAll("[data-since]").forEach(function (el) {
      el.textContent = human((now - Date.parse(el.getAttribute("data-since"))) / 1000);
    });
    // A claim ("I'm on it") lapses by itself: once its time has passed it is no longer shown.
    document.querySelectorAll("[data-until]").forEach(function (el) {
      if (Date.parse(el.getAttribute("data-until")) <= now) el.hidden = true;
    });
  }
  setInterval(tick, 1000);
  document.addEventListener("DOMContentLoaded", tick);

  // -- live updates ----------------------------------------------------------------------
  // One EventSource per page; "bye" means the server ended this stream (signed out, disabled,
  // roles changed): stop, and say so, rather than reconnect.
  function connect(handlers) {
    if (!window.EventSource) return null;
    // From the log size this page was rendered at: nothing that happened since is missed.
    // (a desk serving several logs: "log_a:120,log_b:7", one size per log; ?log= streams the page's log alone)
    var size = document.body.dataset.logSize, only = document.body.dataset.log;
    var query = [];
    if (size) query.push("after=" + encodeURIComponent(size));
    if (only) query.push("log=" + encodeURIComponent(only));
    var es = new EventSource("/events" + (query.length ? "?" + query.join("&") : ""));
    var live = document.getElementById("live");
    es.addEventListener("hello", function () { if (live) { live.dataset.state = "live"; live.textContent = "live"; } });
    es.onerror = function () { if (live && es.readyState !== 2) { live.dataset.state = "connecting"; live.textContent = "reconnecting…"; } };
    es.addEventListener("bye", function (ev) {
      es.close();
      var why = "";
      try { why = JSON.parse(ev.data).reason || ""; } catch (e) { /* no reason */ }
      if (live) { live.dataset.state = "ended"; live.textContent = "live updates ended (" + (why || "signed out") + ")"; }
      var box = document.getElementById("stream-ended");
      if (box) { box.hidden = false; box.textContent = "Live updates ended: " + (why || "signed out") + ". Reload the page (you may need to sign in again)."; }
      document.body.dataset.stream = "ended";
    });
    var last = {};  // per log: a reconnect replays from the page's size, so each entry's event is handled once
    Object.keys(handlers).forEach(function (name) {
      es.addEventListener(name, function (ev) {
        var data = JSON.parse(ev.data), key = data.log || "";
        if (typeof data.seq === "number") { if (data.seq <= (key in last ? last[key] : -1)) return; last[key] = data.seq; }
        handlers[name](data);
      });
    });
    document.body.dataset.stream = "open";
    return es;
  }

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function cell(text, cls) { return el("td", cls, text); }
  function middle(text, n) {  // as desk/present.py middle: an id's start and end
    if (text.length <= n) return text;
    var tail = Math.floor((n - 1) / 2);
    return text.slice(0, n - 1 - tail) + "…" + text.slice(text.length - tail);
  }
  function cut(text, n) {
    text = String(text || "").replace(/\s+/g, " ").trim();
    return text.length <= n ? text : text.slice(0, n - 1).replace(/[ ,;:]+$/, "") + "…";
  }

  // Replace elements with the same-id elements of a server-rendered fragment (escaped by the
  // server's templates; parsed inert by DOMParser, then adopted).
  function refresh(ids, url) {
    ids = [].concat(ids);
    if (!ids.some(function (id) { return document.getElementById(id); })) return Promise.resolve();
    return fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } }).then(function (r) {
      if (!r.ok) return;
      return r.text().then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        ids.forEach(function (id) {
          var fresh = doc.getElementById(id), current = document.getElementById(id);
          if (fresh && current) current.replaceWith(document.importNode(fresh, true));
        });
        tick();
        document.body.dataset.refreshed = String(Date.now());
      });
    }).catch(function () { /* the next event tries again */ });
  }

  function queueRow(ev) {
    var tr = document.createElement("tr");
    tr.dataset.review = ev.review;
    tr.dataset.frontier = ev.frontier || "";
    tr.className = "fresh";
    var what = cell(undefined, "what");
    var a = el("a", "headline");
    a.href = "/reviews/" + encodeURIComponent(ev.review);
    a.appendChild(el("span", "agent", ev.agent || "The agent"));
    a.appendChild(document.createTextNode(" wants to "));
    a.appendChild(el("strong", "tool", ev.tool));
    if (ev.lead || (ev.changed && ev.lead_parts && ev.lead_parts.length)) {
      a.appendChild(document.createTextNode(": "));
      var leadSpan = el("span", "lead");
      if (ev.changed && ev.lead_parts) showParts(leadSpan, ev.lead_parts); else leadSpan.textContent = cut(ev.lead, 120);
      a.appendChild(leadSpan);
    }
    what.appendChild(a);
    var others = ev.other_args || [];
    if (others.length || ev.more) {
      var keys = el("div", "keys");
      others.forEach(function (k) {
        var span = el("span", "key"); span.title = k.name + ": " + k.full;
        span.appendChild(el("span", "k", k.name));
        if (k.was) showParts(span, [{ text: k.text, was: k.was }]); else span.appendChild(document.createTextNode(k.text));
        keys.appendChild(span);
      });
      if (ev.more) keys.appendChild(el("span", "key more", "+" + ev.more + " more"));
      what.appendChild(keys);
    }
    if (ev.question) what.appendChild(el("div", "asks", "Asks you: " + cut(ev.question, 140)));
    // A sealed log's call whose values do not match the record (desk/reveal.py): none is shown.
    if (ev.problem) { what.appendChild(el("div", "disagrees-note tampered", "Its values do not match the record, so none is shown. This may be tampering: tell your administrator.")); tr.className += " disagrees withheld"; }
    var coord = el("div", "coord"); coord.dataset.needed = String(ev.needed || 1);
    if (ev.needed > 1) { var q = el("span", "q", "needs " + ev.needed + " approvals"); q.dataset.approvals = "0"; coord.appendChild(q); }
    what.appendChild(coord);
    // What tells two like calls apart: the session, the review (and the age, in its own column).
    var ids = el("div", "ids"), sid = String(ev.session || ""), rid = String(ev.review || "");
    if (sid) {
      var se = el("span", "", "session " + middle(sid, 16)); se.title = "session " + sid;
      ids.appendChild(se); ids.appendChild(document.createTextNode(" "));
      ids.appendChild(el("span", "sep", "·")); ids.appendChild(document.createTextNode(" "));
    }
    var re = el("span", "", rid.slice(0, 9)); re.title = "review " + rid; ids.appendChild(re);
    var logs = queueLogs();
    if (ev.log && logs[ev.log]) {  // a desk serving several logs names each row's log
      ids.insertBefore(document.createTextNode(" "), ids.firstChild);
      ids.insertBefore(el("span", "sep", "·"), ids.firstChild);
      ids.insertBefore(document.createTextNode(" "), ids.firstChild);
      var lg = el("span", "log", logs[ev.log]); lg.title = "log " + ev.log; ids.insertBefore(lg, ids.firstChild);
    }
    what.appendChild(ids);
    tr.appendChild(what);
    var since = cell(undefined, "since"); var s = el("span");
    s.setAttribute("data-since", ev.opened_at); since.appendChild(s); tr.appendChild(since);
    var dl = cell();
    if (ev.deadline) { var d = el("span", "deadline"); d.setAttribute("data-deadline", ev.deadline); dl.appendChild(d); }
    else dl.appendChild(el("span", "muted", "none"));
    tr.appendChild(dl);
    var go = cell(undefined, "go"); var b = el("a", "button small", "Review");
    b.href = a.href; go.appendChild(b); tr.appendChild(go);
    return tr;
  }

  // Phrases of a summary (desk/summary.py Part): what will run, the agent's proposal struck through beside
  // it where a reviewer changed it (as templates/_macros.html "phrase" renders them).
  function showParts(box, parts) {
    box.textContent = "";
    parts.forEach(function (p, i) {
      if (i) box.appendChild(document.createTextNode(" "));
      if (!p.was) { box.appendChild(document.createTextNode(p.text)); return; }
      var span = el("span", "changed"), del = el("del", "", p.was);
      del.title = "as the agent proposed it";
      span.appendChild(del);
      if (p.text) { span.appendChild(document.createTextNode(" ")); var ins = el("ins", "", p.text); ins.title = "what will run"; span.appendChild(ins); }
      box.appendChild(span);
    });
  }

  function queueLogs() {  // log id -> its name, on a desk serving several logs (the queue table says)
    var table = document.getElementById("queue");
    try { return table && table.dataset.logs ? JSON.parse(table.dataset.logs) : {}; } catch (e) { return {}; }
  }

  function setupQueue() {
    var table = document.getElementById("queue");
    if (!table) return;
    var body = document.getElementById("queue-body");
    var count = document.getElementById("pending-count");
    var empty = document.getElementById("queue-empty");
    var wantTool = table.dataset.tool, wantAgent = table.dataset.agent;
    var byDeadline = table.dataset.sort === "deadline";
    var onLast = table.dataset.last === "yes";
    var pageSize = parseInt(table.dataset.pageSize, 10) || 50;
    var me = table.dataset.me || "";
    function rows() { return body.querySelectorAll("tr[data-review]"); }
    function row(id) { return body.querySelector('tr[data-review="' + CSS.escape(id) + '"]'); }
    function bump(d) { count.textContent = String(Math.max(0, parseInt(count.textContent, 10) + d)); }
    function refreshEmpty() { empty.hidden = rows().length > 0; }
    var pending = null;
    function recent() {  // coalesce a burst of events into one refresh
      if (pending) return;
      pending = setTimeout(function () { pending = null; refresh("recent", "/queue/recent"); }, 150);
    }
    function when(tr) {
      var d = tr.querySelector("[data-deadline]");
      return d ? Date.parse(d.getAttribute("data-deadline")) : Infinity;
    }
    function place(tr, ev) {
      var same = body.querySelectorAll('tr[data-frontier="' + CSS.escape(ev.frontier || "") + '"]');
      if (same.length) {  // a call of a frontier already listed joins its group
        var last = same[same.length - 1];
        last.after(tr);
        tr.classList.add("grouped");
        same[0].classList.add("grouped");
        var head = body.querySelector('tr.group-head[data-group="' + CSS.escape(ev.frontier) + '"]');
        if (!head) {
          head = el("tr", "group-head"); head.dataset.group = ev.frontier;
          var td = el("td"); td.colSpan = 4;
          td.appendChild(el("strong", "", "Paused together"));
          td.appendChild(document.createTextNode(" · "));
          td.appendChild(el("span", "group-size", "2"));
          td.appendChild(document.createTextNode(" calls, "));
          td.appendChild(el("span", "group-open", "2"));
          td.appendChild(document.createTextNode(" still open. The agent continues once every one is decided."));
          head.appendChild(td);
          same[0].before(head);
        } else {
          ["group-size", "group-open"].forEach(function (c) {
            var n = head.querySelector("." + c); n.textContent = String(parseInt(n.textContent, 10) + 1);
          });
        }
        return true;
      }
      if (byDeadline) {
        var mine = ev.deadline ? Date.parse(ev.deadline) : Infinity;
        var later = Array.prototype.find.call(rows(), function (r) { return when(r) > mine; });
        if (later) { (later.previousElementSibling && later.previousElementSibling.classList.contains("group-head") ? later.previousElementSibling : later).before(tr); return true; }
      }
      if (!onLast || rows().length >= pageSize) return false;
      body.appendChild(tr);
      return true;
    }
    connect({
      opened: function (ev) {
        if ((wantTool && ev.tool !== wantTool) || (wantAgent && ev.agent !== wantAgent)) return;
        if (body.querySelector('tr[data-review="' + CSS.escape(ev.review) + '"]')) return;
        bump(1);
        if (place(queueRow(ev), ev)) { refreshEmpty(); tick(); }
      },
      closed: function (ev) {
        var tr = body.querySelector('tr[data-review="' + CSS.escape(ev.review) + '"]');
        if (tr) {
          var frontier = tr.dataset.frontier;
          tr.remove(); bump(-1); refreshEmpty();
          var head = body.querySelector('tr.group-head[data-group="' + CSS.escape(frontier) + '"]');
          if (head) {
            var open = head.querySelector(".group-open");
            open.textContent = String(Math.max(0, parseInt(open.textContent, 10) - 1));
            if (!body.querySelector('tr[data-frontier="' + CSS.escape(frontier) + '"]')) head.remove();
          }
        } else if (!wantTool && !wantAgent) bump(-1);
        recent();
      },
      approval: function (ev) {
        var tr = row(ev.review);
        if (!tr) return;
        var coord = coordOf(tr), needed = ev.needed || parseInt(coord.dataset.needed, 10) || 1;
        if (ev.kind === "edited") {
          // A new round: approvals of the earlier args no longer count; the row reads as the changed call.
          if (ev.lead !== undefined) {
            var lead = tr.querySelector("a.headline .lead");
            if (lead && ev.lead_parts) showParts(lead, ev.lead_parts);
            else if (lead) lead.textContent = cut(ev.lead, 120);
          }
          var you = coord.querySelector(".you"); if (you) you.remove();
        }
        if (ev.approvals) {
          var q = part(coord, "q");
          q.textContent = ev.approvals.length + " of " + needed + " approvals: " + ev.approvals.join(", ");
          q.dataset.approvals = String(ev.approvals.length);
          q.classList.add("some");
          if (ev.approvals.indexOf(me) >= 0 && !coord.querySelector(".you")) q.after(el("span", "you", "you approved"));
        }
      },
      claimed: function (ev) {
        var tr = row(ev.review);
        if (!tr) return;
        var c = part(coordOf(tr), "claim");
        var mine = ev.reviewer === me;
        c.textContent = (mine ? "you are" : ev.reviewer + " is") + " on it until " + hhmm(ev.until);
        c.setAttribute("data-until", ev.until);
        c.classList.toggle("mine", mine);
        c.hidden = false;
        tick();
      },
      escalated: function (ev) {
        var tr = row(ev.review);
        if (!tr && ev["new"] && ev.tool) {  // handed to a role of this reader: new in their queue
          if ((wantTool && ev.tool !== wantTool) || (wantAgent && ev.agent !== wantAgent)) return;
          bump(1);
          tr = queueRow(ev);
          if (place(tr, ev)) { refreshEmpty(); tick(); } else tr = null;
        }
        if (tr) part(coordOf(tr), "esc").textContent = "escalated to role " + ev.role;
      },
      resumed: recent,
      executed: recent,
      replied: recent,
      resume_failed: recent
    });
    keysForQueue(body);
  }
  function coordOf(tr) {
    var c = tr.querySelector(".coord");
    if (!c) { c = el("div", "coord"); tr.querySelector("td.what").appendChild(c); }
    return c;
  }
  function part(coord, cls) {  // the row's span of one kind (approvals, escalation, claim), made when missing
    var found = coord.querySelector("." + cls);
    if (!found) {
      found = el("span", cls);
      var order = ["q", "you", "esc", "claim"], after = null;
      order.slice(0, order.indexOf(cls)).forEach(function (c) { var x = coord.querySelector("." + c); if (x) after = x; });
      if (after) after.after(found); else coord.prepend(found);
    }
    return found;
  }
  function hhmm(iso) { var d = new Date(Date.parse(iso)); return isNaN(d) ? "" : d.toISOString().slice(11, 16) + " UTC"; }

  // -- review page -----------------------------------------------------------------------
  function pointerEscape(k) { return String(k).replace(/~/g, "~0").replace(/\//g, "~1"); }
  function isObj(x) { return x !== null && typeof x === "object" && !Array.isArray(x); }
  function equal(a, b) { return JSON.stringify(canon(a)) === JSON.stringify(canon(b)); }
  function canon(x) {
    if (Array.isArray(x)) return x.map(canon);
    if (isObj(x)) { var o = {}; Object.keys(x).sort().forEach(function (k) { o[k] = canon(x[k]); }); return o; }
    return x;
  }

  // RFC 6902 patch from a to b: recursive on objects, whole-value replace elsewhere.
  function diffPatch(a, b, path, out) {
    if (equal(a, b)) return out;
    if (isObj(a) && isObj(b)) {
      Object.keys(a).forEach(function (k) {
        if (!(k in b)) out.push({ op: "remove", path: path + "/" + pointerEscape(k) });
      });
      Object.keys(b).forEach(function (k) {
        var p = path + "/" + pointerEscape(k);
        if (!(k in a)) out.push({ op: "add", path: p, value: b[k] });
        else diffPatch(a[k], b[k], p, out);
      });
      return out;
    }
    out.push({ op: "replace", path: path, value: b });
    return out;
  }

  // Line diff (LCS) of two pretty-printed JSON texts.
  function lineDiff(a, b) {
    var x = a.split("\n"), y = b.split("\n");
    if (x.length * y.length > 4e6) return null;
    var n = x.length, m = y.length, i, j;
    var L = []; for (i = 0; i <= n; i++) { L.push(new Int32Array(m + 1)); }
    for (i = n - 1; i >= 0; i--) for (j = m - 1; j >= 0; j--)
      L[i][j] = x[i] === y[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
    var out = []; i = 0; j = 0;
    while (i < n && j < m) {
      if (x[i] === y[j]) { out.push([" ", x[i]]); i++; j++; }
      else if (L[i + 1][j] >= L[i][j + 1]) { out.push(["-", x[i]]); i++; }
      else { out.push(["+", y[j]]); j++; }
    }
    while (i < n) out.push(["-", x[i++]]);
    while (j < m) out.push(["+", y[j++]]);
    return out;
  }

  function typeOf(v) {
    if (v === null) return "null";
    if (Array.isArray(v)) return "array";
    if (typeof v === "number") return Number.isInteger(v) ? "integer" : "number";
    return typeof v;
  }
  function typeOk(v, kinds) {
    var have = typeOf(v);
    return kinds.some(function (want) {
      return want === have || (want === "number" && have === "integer");
    });
  }
  function join(path, key) { return path ? path + "." + key : key; }
  // Same subset as audit/schema.py (the server re-checks with it): type (JSON Schema or
  // ADK's upper-case names), enum, required, properties (unknown ones refused), items, nullable.
  function check(schema, v, path, errs) {
    if (!schema || typeof schema !== "object") return errs;
    var name = path || "args";
    if (v === null && schema.nullable) return errs;
    var t = schema.type, kinds = t === undefined || t === null ? [] : (Array.isArray(t) ? t : [t]);
    kinds = kinds.map(function (k) { return String(k).toLowerCase(); }).filter(function (k) { return k !== "type_unspecified"; });
    if (kinds.length && !typeOk(v, kinds)) { errs.push(name + ": expected type " + kinds.join(" or ") + ", found " + typeOf(v)); return errs; }
    if (schema.enum && schema.enum.length && !schema.enum.some(function (e) { return equal(e, v); })) {
      errs.push(name + ": expected one of " + JSON.stringify(schema.enum)); return errs;
    }
    if (isObj(v) && (schema.properties || schema.required)) {
      var props = schema.properties || {};
      (schema.required || []).forEach(function (k) { if (!(k in v)) errs.push(join(path, k) + ": required parameter is missing"); });
      if (schema.additionalProperties === undefined || schema.additionalProperties === false) {
        if (Object.keys(props).length) Object.keys(v).forEach(function (k) {
          if (!(k in props)) errs.push(join(path, k) + ": not a parameter of this tool");
        });
      }
      Object.keys(v).forEach(function (k) { if (isObj(props[k])) check(props[k], v[k], join(path, k), errs); });
    }
    if (Array.isArray(v) && isObj(schema.items)) v.forEach(function (x, i) { check(schema.items, x, name + "[" + i + "]", errs); });
    return errs;
  }

  function safeParse(t) { try { return JSON.parse(t); } catch (e) { return undefined; } }

  function setupReview() {
    var dataEl = document.getElementById("review-data");
    if (!dataEl) return;
    var data = JSON.parse(dataEl.textContent);
    // A form field that does not read (not a number, bad JSON) stops the decision before it is
    // signed or sent: the JSON behind the form would not be what the person sees.
    document.addEventListener("submit", function (ev) {
      var form = ev.target;
      if (!form.classList || !form.classList.contains("decision")) return;
      var bad = form.querySelector('[data-editor][data-mode="form"] [data-json] textarea[data-field-errors="yes"]');
      if (!bad) return;
      ev.preventDefault();
      ev.stopImmediatePropagation();
      say(document.getElementById("sign-status"), "Fix the fields marked ✗ first. Nothing was sent.", "bad");
    }, true);
    setupSigning(data);

    document.querySelectorAll(".tab").forEach(function (tab) {
      tab.addEventListener("click", function () { openPane(tab.dataset.tab); });
    });
    // After a failed edit, open the pane the person was using.
    var err = document.getElementById("decision-error");
    if (err && document.getElementById("edit-form")) {
      var editor0 = document.getElementById("args-editor");
      if (editor0 && !equal(safeParse(editor0.value), data.args)) openPane("edit");
    }

    var editor = document.getElementById("args-editor");
    if (editor) {
      var patchField = document.getElementById("patch-field");
      var patchView = document.getElementById("patch-view");
      var diffView = document.getElementById("diff-view");
      var changeList = document.getElementById("change-list");
      var checks = document.getElementById("schema-check");
      var btn = document.getElementById("edit-btn");
      var before = JSON.stringify(canon(data.args), null, 2);
      var update = function () {
        var parsed;
        checks.textContent = "";
        var fieldErrors = editor.dataset.fieldErrors === "yes";
        try { parsed = JSON.parse(editor.value); }
        catch (e) {
          var li = el("div", "bad", "Not valid JSON: " + e.message);
          checks.appendChild(li); btn.disabled = true; patchField.value = ""; return;
        }
        if (!isObj(parsed)) {
          checks.appendChild(el("div", "bad", "The args must be a JSON object."));
          btn.disabled = true; patchField.value = ""; return;
        }
        var patch = diffPatch(data.args, parsed, "", []);
        patchField.value = JSON.stringify(patch);
        patchView.textContent = JSON.stringify(patch, null, 2);
        // What you change, argument by argument; the line diff only where a value is too long for one line.
        diffView.hidden = !showChanges(changeList, data.args, parsed);
        diffView.textContent = "";
        if (!patch.length) {
          diffView.appendChild(el("span", "muted", "No changes yet."));
        } else {
          var d = lineDiff(before, JSON.stringify(canon(parsed), null, 2));
          (d || []).forEach(function (line) {
            diffView.appendChild(el("span", line[0] === "+" ? "add" : line[0] === "-" ? "del" : "same", line[0] + " " + line[1]));
          });
        }
        var errs = data.schema ? check(data.schema, parsed, "", []) : [];
        if (errs.length) {
          errs.forEach(function (m) { checks.appendChild(el("div", "bad", "✗ " + m)); });
        } else {
          checks.appendChild(el("div", "ok", data.schema ? "✓ Matches the tool's parameters." : "No parameter schema was given for this tool; the server checks what it can."));
        }
        btn.disabled = fieldErrors || errs.length > 0 || patch.length === 0;
      };
      editor.addEventListener("input", update);
      update();
    }
    document.querySelectorAll("[data-editor]").forEach(function (box) {
      var name = box.dataset.editor;
      setupEditor(box, name === "args" ? data.args : data.payload);
    });

    // Live: approvals toward a quorum, a claim, an escalation (the progress card and the timeline).
    var progressing = null;
    function progress() {
      if (progressing) return;
      progressing = setTimeout(function () {
        progressing = null;
        refresh(["progress", "claim", "timeline-card"], "/reviews/" + encodeURIComponent(data.id) + "/progress");
      }, 100);
    }
    // Live: someone else decided while this page was open; and after a decision, what happened next.
    var pending = null;
    function outcome() {
      if (pending) return;
      pending = setTimeout(function () {
        pending = null;
        refresh(["outcome", "timeline-card"], "/reviews/" + encodeURIComponent(data.id) + "/outcome");
      }, 100);
    }
    connect({
      closed: function (ev) {
        if (ev.review !== data.id) { if (document.getElementById("outcome")) outcome(); return; }
        if (document.getElementById("decision-done") || document.getElementById("outcome")) { outcome(); return; }
        var box = document.getElementById("closed-live");
        box.hidden = false;
        if ((ev.status === "approved" || ev.status === "edited") && document.querySelector('#progress[data-mine="yes"]')) {
          // It had this reviewer's approval already: the other approval completed it.
          box.textContent = "This review is now " + ev.status + ": " + String(ev.actor) + " gave the approval it still needed. Reload to see what happens next.";
        } else {
          box.textContent = "This review was just " + ev.status + " by " + String(ev.actor) + ". Your decision would not be recorded.";
        }
        document.querySelectorAll("#decide button[type=submit]").forEach(function (b) { b.disabled = true; });
        var st = document.getElementById("status"); if (st) { st.textContent = ev.status; st.className = "status s-" + ev.status; }
      },
      approval: function (ev) {
        if (ev.review !== data.id) return;
        progress();
        // An edit started a new round: what this page shows (and would sign) is no longer what is approved.
        if (data.round !== null && data.round !== undefined && ev.round !== data.round) {
          var box = document.getElementById("closed-live");
          box.hidden = false;
          box.textContent = String(ev.actor) + " just changed the arguments, which starts a new round of approvals. " +
            "Reload to review what will run now; an approval or edit of the arguments shown here would not be recorded.";
          ["approve-btn", "edit-btn"].forEach(function (id) { var b = document.getElementById(id); if (b) b.disabled = true; });
          document.body.dataset.stale = "round";
        }
      },
      claimed: function (ev) { if (ev.review === data.id) progress(); },
      escalated: function (ev) { if (ev.review === data.id) progress(); },
      resumed: function (ev) { if (ev.frontier === data.frontier) outcome(); },
      executed: function (ev) { if (ev.review === data.id) outcome(); },
      replied: function (ev) { if (ev.frontier === data.frontier) outcome(); },
      resume_failed: function (ev) { if (ev.frontier === data.frontier) outcome(); }
    });
    keysForReview(data);
  }

  // The edit's changes as a person reads them: one line per argument, "amount 900 → 90" (the server's
  // quorum.changes writes the same for a round's edit); a long or many-line text, line by line. Returns
  // whether a changed object or list is too long for its line (then the whole line diff is shown too).
  function shownValue(v) {
    var t = JSON.stringify(v);
    return { text: cut(t, 80), long: t.length > 80 || (v !== null && typeof v === "object") };
  }
  function textLines(li, a, b) {
    var d = lineDiff(a, b), pre = el("pre", "diff small");
    (d || [["-", a], ["+", b]]).forEach(function (line) {
      pre.appendChild(el("span", line[0] === "+" ? "add" : line[0] === "-" ? "del" : "same", line[0] + " " + line[1]));
    });
    li.appendChild(pre);
  }
  function showChanges(list, before, after) {
    list.textContent = "";
    var long = false, n = 0;
    Object.keys(before).concat(Object.keys(after).filter(function (k) { return !(k in before); })).forEach(function (k) {
      var had = k in before, has = k in after;
      if (had && has && equal(before[k], after[k])) return;
      n++;
      var li = el("li"), a = had ? shownValue(before[k]) : null, b = has ? shownValue(after[k]) : null;
      li.appendChild(el("code", "pname", k));
      li.appendChild(document.createTextNode(" "));
      if (typeof before[k] === "string" && typeof after[k] === "string" && (a.long || b.long || /\n/.test(before[k] + after[k]))) {
        li.appendChild(el("span", "muted", "changed, line by line:"));
        textLines(li, before[k], after[k]);
        list.appendChild(li);
        return;
      }
      li.appendChild(a ? el("span", "del", a.text) : el("span", "muted", "(not set)"));
      li.appendChild(document.createTextNode(" → "));
      li.appendChild(b ? el("span", "add", b.text) : el("span", "muted", "(removed)"));
      if ((a && a.long) || (b && b.long)) long = true;
      list.appendChild(li);
    });
    if (!n) list.appendChild(el("li", "muted", "No changes yet."));
    return long;
  }

  function openPane(name) {
    var tab = document.querySelector('.tab[data-tab="' + name + '"]');
    if (!tab) return null;
    document.querySelectorAll(".tab").forEach(function (t) { t.classList.toggle("on", t === tab); });
    var pane = null;
    document.querySelectorAll(".pane").forEach(function (p) {
      p.hidden = p.dataset.pane !== name;
      if (!p.hidden) pane = p;
    });
    return pane;
  }

  // -- editing by form ------------------------------------------------------------------------
  // desk/forms.py renders one field per parameter; here they are read back into the JSON
  // editor (the only thing sent and signed), and the JSON is written back into them.
  function normalise(s) { return String(s).replace(/\r\n?/g, "\n"); }
  function readField(f, original) {
    var widget = f.dataset.widget, name = f.dataset.name, present = f.dataset.present === "yes";
    var input = f.querySelector("input, textarea, select");
    var before = original && Object.prototype.hasOwnProperty.call(original, name) ? original[name] : undefined;
    if (widget === "checkbox") return { value: input.checked };
    if (widget === "number" || widget === "integer") {
      if (input.validity && input.validity.badInput) return { error: name + ": expected a number" };
      if (input.value === "") return { omit: true };
      var n = Number(input.value);
      if (!isFinite(n)) return { error: name + ": expected a number" };
      if (widget === "integer" && !Number.isInteger(n)) return { error: name + ": expected a whole number" };
      return { value: n };
    }
    if (widget === "select") {
      if (input.value === "") return { omit: true };
      return { value: JSON.parse(input.value) };
    }
    if (widget === "json") {
      if (!input.value.trim()) return { omit: true };
      try { return { value: JSON.parse(input.value) }; }
      catch (e) { return { error: name + ": not valid JSON (" + e.message + ")" }; }
    }
    var text = input.value;
    if (!present && text === "") return { omit: true };
    // A textarea turns CR LF into LF: an untouched value stays exactly what the agent sent.
    if (typeof before === "string" && normalise(before) === text) return { value: before };
    return { value: text };
  }
  function writeField(f, has, value) {
    var widget = f.dataset.widget;
    var input = f.querySelector("input, textarea, select");
    if (widget === "checkbox") { input.checked = has && value === true; return has && typeof value !== "boolean"; }
    if (!has) { input.value = ""; return false; }
    if (widget === "number" || widget === "integer") {
      if (typeof value !== "number") return true;
      input.value = String(value); return false;
    }
    if (widget === "select") {
      var want = JSON.stringify(value);
      var found = Array.prototype.some.call(input.options, function (o) { return o.value === want; });
      if (!found) return true;
      input.value = want; return false;
    }
    if (widget === "json") { input.value = JSON.stringify(value, null, 2); return false; }
    if (typeof value !== "string") return true;
    input.value = value; return false;
  }
  function setupEditor(box, original) {
    var fieldsBox = box.querySelector("[data-fields]");
    var json = box.querySelector("[data-json] textarea");
    var errors = box.querySelector("[data-errors]");
    if (!fieldsBox || !json) return;
    var modes = box.querySelector(".modes");
    var fields = Array.prototype.slice.call(fieldsBox.querySelectorAll("[data-field]"));
    function fromFields() {
      var out = {}, errs = [];
      var order = Object.keys(isObj(original) ? original : {});
      fields.forEach(function (f) { if (order.indexOf(f.dataset.name) < 0) order.push(f.dataset.name); });
      var got = {};
      fields.forEach(function (f) { got[f.dataset.name] = readField(f, original); });
      order.forEach(function (name) {
        var r = got[name];
        if (!r) return;
        if (r.error) errs.push(r.error);
        else if (!r.omit) out[name] = r.value;
      });
      errors.textContent = "";
      errs.forEach(function (m) { errors.appendChild(el("div", "bad", "✗ " + m)); });
      json.dataset.fieldErrors = errs.length ? "yes" : "no";
      if (!errs.length) json.value = JSON.stringify(out, null, 2);
      json.dispatchEvent(new Event("input"));
    }
    function toFields() {
      var parsed = safeParse(json.value);
      if (!isObj(parsed)) return "The JSON is not a valid object; fix it, or stay in JSON.";
      var names = fields.map(function (f) { return f.dataset.name; });
      var extra = Object.keys(parsed).filter(function (k) { return names.indexOf(k) < 0; });
      if (extra.length) return "The JSON has " + extra.join(", ") + ", which the form does not show; stay in JSON.";
      var mismatch = [];
      fields.forEach(function (f) {
        var has = Object.prototype.hasOwnProperty.call(parsed, f.dataset.name);
        if (writeField(f, has, parsed[f.dataset.name])) mismatch.push(f.dataset.name);
      });
      if (mismatch.length) return "In the JSON, " + mismatch.join(", ") + " has a value the form cannot show; stay in JSON.";
      return "";
    }
    function mode(which) {
      if (which === "form") {
        var why = toFields();
        if (why) { errors.textContent = ""; errors.appendChild(el("div", "bad", why)); return; }
        fromFields();
      }
      box.dataset.mode = which;
      fieldsBox.hidden = which !== "form";
      box.querySelector("[data-json]").hidden = which === "form";
      modes.querySelectorAll(".mode").forEach(function (b) { b.classList.toggle("on", b.dataset.mode === which); });
      if (which === "json") { errors.textContent = ""; json.dataset.fieldErrors = "no"; json.dispatchEvent(new Event("input")); }
    }
    fields.forEach(function (f) {
      var input = f.querySelector("input, textarea, select");
      input.addEventListener(input.type === "checkbox" || input.tagName === "SELECT" ? "change" : "input", fromFields);
    });
    modes.hidden = false;
    modes.querySelectorAll(".mode").forEach(function (b) { b.addEventListener("click", function () { mode(b.dataset.mode); }); });
    // Start with the form when it shows the JSON as it is (after a refused edit the JSON may not fit).
    if (!toFields()) mode("form");
  }

  // -- keyboard ----------------------------------------------------------------------------------
  // Documented in the "?" list (templates/base.html) and the README. Never while typing, and a
  // decision is never made by one key: "a" prepares the approval, Enter (on its button) confirms.
  function typing(t) {
    if (!t) return false;
    var tag = t.tagName;
    return tag === "TEXTAREA" || tag === "SELECT" || t.isContentEditable ||
      (tag === "INPUT" && ["checkbox", "radio", "button", "submit"].indexOf(t.type) < 0);
  }
  function toggleHelp(show) {
    var help = document.getElementById("keys-help");
    if (!help) return;
    help.hidden = show === undefined ? !help.hidden : !show;
    if (!help.hidden) { var b = help.querySelector("button"); if (b) b.focus(); }
  }
  function onKeys(map) {
    document.addEventListener("keydown", function (ev) {
      if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
      if (ev.key === "Escape") {
        var help = document.getElementById("keys-help");
        if (help && !help.hidden) { toggleHelp(false); ev.preventDefault(); return; }
        if (typing(ev.target)) { ev.target.blur(); ev.preventDefault(); }
        return;
      }
      if (typing(ev.target)) return;
      if (ev.key === "?") { toggleHelp(); ev.preventDefault(); return; }
      var fn = map[ev.key];
      if (fn) { if (fn(ev) !== false) ev.preventDefault(); }
    });
  }
  function setupHelp() {
    document.querySelectorAll("[data-help]").forEach(function (b) { b.addEventListener("click", function () { toggleHelp(); }); });
  }
  function keysForQueue(body) {
    var at = -1;
    function rows() { return Array.prototype.slice.call(body.querySelectorAll("tr[data-review]")); }
    function select(i) {
      var all = rows();
      if (!all.length) return;
      at = Math.max(0, Math.min(all.length - 1, i));
      all.forEach(function (r, k) { r.classList.toggle("selected", k === at); r.setAttribute("aria-selected", k === at ? "true" : "false"); });
      all[at].scrollIntoView({ block: "nearest" });
    }
    function open() {
      var all = rows();
      if (at < 0 || !all[at]) return false;
      window.location.assign(all[at].querySelector("a.headline").href);
    }
    onKeys({
      j: function () { select(at + 1); },
      k: function () { select(at < 0 ? 0 : at - 1); },
      Enter: open,
      o: open
    });
  }
  function keysForReview(data) {
    function go(id) { if (id) window.location.assign("/reviews/" + encodeURIComponent(id)); }
    function focusWhy() {
      var pane = document.querySelector(".pane:not([hidden])");
      var why = pane && pane.querySelector("[data-why]");
      if (why) why.focus();
    }
    onKeys({
      j: function () { go(data.next); },
      k: function () { go(data.prev); },
      u: function () { window.location.assign("/queue"); },
      a: function () { if (openPane("approve")) document.getElementById("approve-btn").focus(); },
      e: function () {
        var pane = openPane("edit");
        if (!pane) return;
        var first = pane.querySelector('[data-editor="args"][data-mode="form"] [data-field] input, [data-editor="args"][data-mode="form"] [data-field] textarea, [data-editor="args"][data-mode="form"] [data-field] select') || document.getElementById("args-editor");
        if (first) first.focus();
      },
      r: function () { if (openPane("reject")) focusWhy(); },
      w: focusWhy
    });
  }

  // -- copying ids -------------------------------------------------------------------------------
  function setupCopy() {
    document.addEventListener("click", function (ev) {
      var t = ev.target.closest ? ev.target.closest("[data-copy]") : null;
      if (!t) return;
      var text = t.getAttribute("data-copy");
      var done = function () {
        t.classList.add("copied");
        document.body.dataset.copied = text;
        setTimeout(function () { t.classList.remove("copied"); }, 1200);
      };
      if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(text).then(done, done);
      else {
        var area = el("textarea"); area.value = text; area.setAttribute("readonly", "");
        area.style.position = "fixed"; area.style.opacity = "0"; document.body.appendChild(area);
        area.select(); try { document.execCommand("copy"); } catch (e) { /* nothing to do */ }
        area.remove(); done();
      }
    });
  }

  // -- RFC 8785 canonical JSON, SHA-256, base64url ------------------------------------------
  // The same bytes signoff.audit.canonical writes: object members sorted by their names' UTF-16
  // code units (RFC 8785 §3.2.3), numbers as ECMAScript writes them (§3.2.2.3, which is what
  // JSON.stringify does), strings escaped as JSON.stringify does (§3.2.2.2), no whitespace.
  function refuse(path, what) { throw new Error(path + ": " + what + " cannot be written as canonical JSON (RFC 8785)"); }
  function wellFormed(s, path) {
    for (var i = 0; i < s.length; i++) {
      var c = s.charCodeAt(i);
      if (c >= 0xD800 && c <= 0xDBFF) {
        var d = s.charCodeAt(i + 1);
        if (!(d >= 0xDC00 && d <= 0xDFFF)) refuse(path, "a lone surrogate");
        i++;
      } else if (c >= 0xDC00 && c <= 0xDFFF) refuse(path, "a lone surrogate");
    }
    return s;
  }
  function canonicalJSON(v, path) {
    path = path || "$";
    if (v === null || v === true || v === false) return String(v);
    if (typeof v === "number") {
      if (!isFinite(v)) refuse(path, "a non-finite number (" + v + ")");
      return JSON.stringify(v);
    }
    if (typeof v === "string") return JSON.stringify(wellFormed(v, path));
    if (Array.isArray(v)) return "[" + v.map(function (x, i) { return canonicalJSON(x, path + "[" + i + "]"); }).join(",") + "]";
    if (typeof v === "object") {
      return "{" + Object.keys(v).sort().map(function (k) {
        return JSON.stringify(wellFormed(k, path)) + ":" + canonicalJSON(v[k], path + "." + k);
      }).join(",") + "}";
    }
    return refuse(path, "a " + typeof v);
  }
  function utf8(s) { return new TextEncoder().encode(s); }
  function hex(buf) { return Array.prototype.map.call(new Uint8Array(buf), function (b) { return (b < 16 ? "0" : "") + b.toString(16); }).join(""); }
  function sha256(bytes) { return crypto.subtle.digest("SHA-256", bytes); }
  function digestOf(value) { return sha256(utf8(canonicalJSON(value))).then(function (h) { return "sha256:" + hex(h); }); }
  function b64url(buf) {
    var bin = "", bytes = new Uint8Array(buf);
    for (var i = 0; i < bytes.length; i++) bin += String.fromCharCode(bytes[i]);
    return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }
  function unb64url(text) {
    var b = atob(text.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((text.length + 3) % 4));
    var out = new Uint8Array(b.length);
    for (var i = 0; i < b.length; i++) out[i] = b.charCodeAt(i);
    return out.buffer;
  }

  function say(box, text, kind) {
    if (!box) return;
    box.hidden = false;
    box.className = "notice " + (kind || "");
    box.textContent = text;
  }

  // -- a decision, signed ----------------------------------------------------------------------
  // The body is what signoff.audit.decision builds on the server (approve_body, edit_body,
  // reject_body), made here from what the page shows; the statement is RFC 8785 of
  // {"log", "kind", "actor", "body"}, and the passkey signs SHA-256 of it as its challenge.
  // data.args are the args the current round approves (round_args: the opened args until someone
  // edits a review that needs several people), and data.round its number (null: one approval).
  function readPayload(form) {
    var field = form.querySelector("[name=payload]");
    if (!field || !field.value.trim()) return null;
    var value;
    try { value = JSON.parse(field.value); }
    catch (e) { throw new Error("The answer to the tool's question is not valid JSON: " + e.message); }
    field.value = JSON.stringify(value);  // the server reads exactly the value that was signed
    return value;
  }
  function decisionBody(kind, form, data) {
    if (kind === "review.rejected") {
      var rejected = { review: data.id, reason: form.querySelector("[name=reason]").value };
      if (data.acting_for) rejected.acting_for = data.acting_for;  // a delegate's decision names whom it is for
      return Promise.resolve(rejected);
    }
    var payload = readPayload(form);
    var rationaleField = form.querySelector("[name=rationale]");
    var rationale = rationaleField ? rationaleField.value : "";
    var args = data.args, patch = null;
    if (kind === "review.edited") {
      try { args = JSON.parse(form.querySelector("[name=args]").value); }
      catch (e) { throw new Error("The edited arguments are not valid JSON: " + e.message); }
      patch = diffPatch(data.args, args, "", []);
      form.querySelector("[name=patch]").value = JSON.stringify(patch);
    }
    if (data.sealed) return sealedBody(kind, form, data, { args: args, patch: patch, payload: payload, rationale: rationale });
    return digestOf(args).then(function (argsDigest) {
      var body = { review: data.id };
      if (patch !== null) body.patch = patch;
      body.args_digest = argsDigest;
      body.rationale = rationale;
      if (payload !== null) body.payload = payload;
      // A review that needs several people: the decision names the round whose args it approves (or edits).
      if (data.round !== null && data.round !== undefined) body.round = data.round;
      if (data.acting_for) body.acting_for = data.acting_for;
      return body;
    });
  }
  // -- a decision on a sealed log (SPEC.md "Values beside the log") ----------------------------
  // The entries hold commitments in place of values: sealed:sha256:<hex SHA-256(salt ‖ RFC 8785(value))>,
  // with a 32-byte salt per value (signoff.audit.sealing). An approval signs the digest of the round's
  // args as the entries hold them (data.sealed_args); an edit signs the patch the log records: whole
  // top-level members replaced, each changed private value by a new commitment with a salt made here,
  // sent beside the signature (hidden fields "salts" and "payload_salt") so that the server builds the
  // very same body (signoff.audit.decision prepare_approve / prepare_edit, sealing.edit_patch). Before it
  // signs, the page checks that every value it shows is the one the log committed to.
  var SEALED = "sealed:sha256:", WHOLE = "";
  function isCommitment(v) { return typeof v === "string" && v.indexOf(SEALED) === 0 && v.length === SEALED.length + 64; }
  function unhex(text) {
    var s = String(text || ""), out = new Uint8Array(s.length / 2);
    if (!/^([0-9a-f]{2})*$/i.test(s)) throw new Error("expected hex, found " + s.slice(0, 20));
    for (var i = 0; i < out.length; i++) out[i] = parseInt(s.substr(2 * i, 2), 16);
    return out;
  }
  function newSalt() { var b = new Uint8Array(32); crypto.getRandomValues(b); return b; }
  function canonicalBytes(v) { return utf8(canonicalJSON(v)); }
  function commit(value, salt) {  // sealing.commit
    if (salt.length !== 32) return Promise.reject(new Error("salt: expected 32 bytes, found " + salt.length));
    var text = canonicalBytes(value), all = new Uint8Array(32 + text.length);
    all.set(salt, 0); all.set(text, 32);
    return sha256(all).then(function (h) { return SEALED + hex(h); });
  }
  function sealedWhole(sealed) {  // sealing.sealed_whole
    var names = Object.keys(sealed);
    return names.length === 1 && names[0] === WHOLE && isCommitment(sealed[WHOLE]);
  }
  function isPrivate(name, value, priv, limits) {  // sealing.is_private: the policy's list, or forced
    return priv === null || priv === undefined || priv.indexOf(name) >= 0 ||
      (typeof value === "string" && value.indexOf("sealed:") === 0) || canonicalBytes(value).length > limits.MAX_CLEAR;
  }
  // Every value the page shows (data.args) against the commitment the log holds for it (data.sealed_args).
  function checkShown(data) {
    var sealed = data.sealed_args || {}, shown = data.args || {}, salts = data.round_salts || {};
    var pairs;
    if (sealedWhole(sealed)) pairs = [[WHOLE, shown, sealed[WHOLE]]];
    else {
      var names = Object.keys(sealed), extra = Object.keys(shown).filter(function (n) { return !(n in sealed); });
      pairs = names.map(function (n) { return [n, n in shown ? shown[n] : undefined, sealed[n]]; });
      extra.forEach(function (n) { pairs.push([n, shown[n], undefined]); });
    }
    return Promise.all(pairs.map(function (p) {
      var name = p[0], value = p[1], held = p[2];
      if (value === undefined || held === undefined) return Promise.resolve(name);
      if (!isCommitment(held)) return Promise.resolve(canonicalJSON(value) === canonicalJSON(held) ? null : name);
      if (!salts[name]) return Promise.resolve(name);
      return commit(value, unhex(salts[name])).then(function (c) { return c === held ? null : name; });
    })).then(function (bad) {
      bad = bad.filter(function (n) { return n !== null; });
      if (!bad.length) return;
      var what = bad.map(function (n) { return n === WHOLE ? "the arguments" : n; }).join(", ");
      throw new Error("Not signed: what this page shows for " + what + " does not match what the log committed to. " +
        "This may be tampering: tell your administrator.");
    });
  }
  // sealing.edit_patch: removals, then additions and changes, each in RFC 8785's member order (by UTF-16
  // code units, which is what JavaScript's default sort compares).
  function sealedEdit(data, args, given) {
    var limits = data.limits, priv = data.private, roundSealed = data.sealed_args, roundPlain = data.args;
    var order = Object.keys(roundPlain).sort();
    var names = Object.keys(args).sort();
    var salts = {};
    names.concat([WHOLE]).forEach(function (n) { salts[n] = given && given[n] ? given[n] : newSalt(); });
    var hexed = {};
    Object.keys(salts).forEach(function (n) { hexed[n] = hex(salts[n]); });
    function whole() {
      return commit(args, salts[WHOLE]).then(function (c) {
        var sealed = {}; sealed[WHOLE] = c;
        return { patch: [{ op: "replace", path: "", value: sealed }], final: sealed, salts: hexed };
      });
    }
    if (sealedWhole(roundSealed)) return whole();
    var patch = [], result = {};
    Object.keys(roundSealed).forEach(function (n) { result[n] = roundSealed[n]; });
    order.forEach(function (n) {
      if (!(n in args)) { patch.push({ op: "remove", path: "/" + pointerEscape(n) }); delete result[n]; }
    });
    var changed = names.filter(function (n) { return !(n in roundPlain && canonicalJSON(roundPlain[n]) === canonicalJSON(args[n])); });
    return Promise.all(changed.map(function (n) {
      return isPrivate(n, args[n], priv, limits) ? commit(args[n], salts[n]) : Promise.resolve(args[n]);
    })).then(function (stored) {
      changed.forEach(function (n, i) {
        patch.push({ op: n in roundPlain ? "replace" : "add", path: "/" + pointerEscape(n), value: stored[i] });
        result[n] = stored[i];
      });
      if (!(WHOLE in args) && Object.keys(result).length <= limits.MAX_MEMBERS && canonicalBytes(result).length <= limits.MAX_SEALED_ARGS) {
        return { patch: patch, final: result, salts: hexed };
      }
      return whole();
    });
  }
  // The answer as the entry holds it: its commitment; an approval reuses the salt of its round's first
  // answer (the same answer, the same commitment), an edit starts a round with a salt of its own.
  function sealedPayload(data, payload, kind) {
    if (payload === null) return Promise.resolve([null, ""]);
    var salt = kind !== "review.edited" && data.round_payload_salt ? unhex(data.round_payload_salt) : newSalt();
    return commit(payload, salt).then(function (c) { return [c, hex(salt)]; });
  }
  function sealedBody(kind, form, data, made) {
    var body = { review: data.id };
    return checkShown(data).then(function () { return sealedPayload(data, made.payload, kind); }).then(function (answer) {
      setField(form, "payload_salt", answer[1]);
      if (kind !== "review.edited") return digestOf(data.sealed_args).then(function (d) { return [null, d, answer[0]]; });
      return sealedEdit(data, made.args).then(function (edit) {
        setField(form, "salts", JSON.stringify(edit.salts));
        return digestOf(edit.final).then(function (d) { return [edit.patch, d, answer[0]]; });
      });
    }).then(function (built) {
      if (built[0] !== null) body.patch = built[0];
      body.args_digest = built[1];
      body.rationale = made.rationale;
      if (built[2] !== null) body.payload = built[2];
      if (data.round !== null && data.round !== undefined) body.round = data.round;
      if (data.acting_for) body.acting_for = data.acting_for;
      return body;
    });
  }
  function setField(form, name, value) {
    var input = form.querySelector('input[name="' + name + '"]');
    if (!input) { input = document.createElement("input"); input.type = "hidden"; input.name = name; form.appendChild(input); }
    input.value = value;
  }
  function signAndSubmit(form, data, status) {
    var kind = form.dataset.kind;
    var button = form.querySelector("button[type=submit]");
    var statement;
    button.disabled = true;
    return Promise.resolve().then(function () { return decisionBody(kind, form, data); }).then(function (body) {
      statement = canonicalJSON({ log: data.log, kind: kind, actor: data.actor, body: body });
      say(status, "Confirm with your passkey: it signs this " + kind.replace("review.", "") + " decision" +
        (body.args_digest ? " of args " + body.args_digest.slice(0, 19) + "…" : "") + ".", "");
      return sha256(utf8(statement));
    }).then(function (challenge) {
      return navigator.credentials.get({ publicKey: {
        challenge: challenge,
        rpId: data.sign.rp_id,
        allowCredentials: data.sign.passkeys.map(function (p) { return { type: "public-key", id: unb64url(p.id) }; }),
        userVerification: "required",
        timeout: 120000
      } });
    }).then(function (cred) {
      if (!cred) throw new Error("No passkey answered.");
      setField(form, "sig_credential", b64url(cred.rawId));
      setField(form, "sig_authenticator_data", b64url(cred.response.authenticatorData));
      setField(form, "sig_client_data", b64url(cred.response.clientDataJSON));
      setField(form, "sig_value", b64url(cred.response.signature));
      say(status, "Signed. Recording your decision…", "good");
      lighten(form);
      form.submit();  // a plain submit: no second "submit" event
    }).catch(function (err) {
      button.disabled = false;
      var why = err && err.name === "NotAllowedError" ? "The passkey did not sign (cancelled or timed out)." : String(err && err.message || err);
      say(status, why + " Nothing was sent; nothing was recorded.", "bad");
    });
  }
  // The server reads the patch when there is one; the whole args JSON beside it would only
  // double the request (which the desk bounds, 1 MB by default), so it is left out.
  function lighten(form) {
    var patch = form.querySelector("[name=patch]"), args = form.querySelector("textarea[name=args]");
    if (patch && args && patch.value) args.disabled = true;
  }
  document.addEventListener("submit", function (ev) {
    if (!ev.defaultPrevented && ev.target.classList && ev.target.classList.contains("decision")) lighten(ev.target);
  });
  function setupSigning(data) {
    if (!data.sign || !data.sign.must) return;  // this log takes this reviewer's decisions unsigned
    var status = document.getElementById("sign-status");
    document.querySelectorAll("form.decision").forEach(function (form) {
      form.addEventListener("submit", function (ev) {
        ev.preventDefault();
        if (!window.PublicKeyCredential || !window.crypto || !crypto.subtle) {
          say(status, "This browser cannot sign with a passkey here (WebAuthn needs https or localhost). Nothing was recorded.", "bad");
          return;
        }
        signAndSubmit(form, data, status);
      });
    });
  }

  // -- delegation (account page): the body signoff.audit.delegation builds, signed like a decision --
  function passkeyAssertion(data, kind, body) {
    var statement = canonicalJSON({ log: data.log, kind: kind, actor: data.actor, body: body });
    return sha256(utf8(statement)).then(function (challenge) {
      return navigator.credentials.get({ publicKey: {
        challenge: challenge, rpId: data.sign.rp_id, userVerification: "required", timeout: 120000,
        allowCredentials: data.sign.passkeys.map(function (p) { return { type: "public-key", id: unb64url(p.id) }; })
      } });
    });
  }
  // Sign what makeBody() builds with the passkey, put the assertion in the form and send it; say why not.
  function signAndSend(form, data, kind, makeBody, status) {
    if (!data.sign.passkeys.length) { say(status, "Register a passkey first: it signs this. Nothing was recorded.", "bad"); return; }
    var button = form.querySelector("button[type=submit]");
    button.disabled = true;
    Promise.resolve().then(function () { return passkeyAssertion(data, kind, makeBody()); }).then(function (cred) {
      if (!cred) throw new Error("No passkey answered.");
      setField(form, "sig_credential", b64url(cred.rawId));
      setField(form, "sig_authenticator_data", b64url(cred.response.authenticatorData));
      setField(form, "sig_client_data", b64url(cred.response.clientDataJSON));
      setField(form, "sig_value", b64url(cred.response.signature));
      form.submit();
    }).catch(function (err) {
      button.disabled = false;
      var why = err && err.name === "NotAllowedError" ? "The passkey did not sign (cancelled or timed out)." : String(err && err.message || err);
      say(status, why + " Nothing was recorded.", "bad");
    });
  }
  function setupDelegations() {
    var el = document.getElementById("delegation-data");
    if (!el) return;
    var data = JSON.parse(el.textContent);
    if (!data.sign || !data.sign.must) return;  // this log takes this reviewer's entries unsigned
    var status = document.getElementById("delegation-status");
    function body(form) {
      var kind = form.dataset.kind, reason = (form.querySelector("[name=reason]").value || "");
      if (kind === "delegation.revoked") {
        return { delegation: form.dataset.delegation, delegator: form.dataset.delegator, delegate: form.dataset.delegate, reason: reason };
      }
      var id = "dg_" + hex(crypto.getRandomValues(new Uint8Array(8)));
      setField(form, "delegation", id);
      var roles = Array.prototype.filter.call(form.querySelectorAll("[name=roles]"), function (c) { return c.checked; })
        .map(function (c) { return c.value; }).sort().filter(function (r, i, all) { return i === 0 || all[i - 1] !== r; });
      var until = form.querySelector("[name=until]").value;
      if (!/^\d{4}-\d{2}-\d{2}$/.test(until)) throw new Error("Choose the date it ends.");
      var out = { delegation: id, delegator: data.actor, delegate: form.querySelector("[name=delegate]").value,
        roles: roles, until: until + "T00:00:00.000000Z" };
      if (reason) out.reason = reason;
      return out;
    }
    document.querySelectorAll("#delegate-form, form.delegation-revoke").forEach(function (form) {
      form.addEventListener("submit", function (ev) {
        ev.preventDefault();
        signAndSend(form, data, form.dataset.kind, function () { return body(form); }, status);
      });
    });
  }

  // A form whose body the server drafted (a proposal): data-body names the script holding it, data-signer the
  // one holding {log, actor, sign}; the passkey signs RFC 8785 of {log, kind, actor, body} before it is sent.
  function setupSignedForms() {
    document.querySelectorAll("form[data-sign-kind][data-body]").forEach(function (form) {
      var signer = JSON.parse(document.getElementById(form.dataset.signer).textContent);
      if (!signer.sign || !signer.sign.must) return;
      var status = form.querySelector("[data-sign-status]");
      form.addEventListener("submit", function (ev) {
        ev.preventDefault();
        signAndSend(form, signer, form.dataset.signKind, function () {
          return JSON.parse(document.getElementById(form.dataset.body).textContent);
        }, status);
      });
    });
  }

  // -- passkey registration (account page) ----------------------------------------------------
  var CODE_KEY = "signoff.enrolment-code";
  function setupSignIn() {
    var form = document.getElementById("signin-form");
    if (!form || !form.hasAttribute("data-keep-code")) return;
    // The initial password is the enrolment code; this tab keeps it (never the server) for the
    // passkey registration that follows, and forgets it once that is done.
    form.addEventListener("submit", function () {
      try { sessionStorage.setItem(CODE_KEY, form.querySelector("[name=password]").value); } catch (e) { /* storage off */ }
    });
  }
  function withLog(url) {  // the log this page is about, on a desk serving several (desk/logs.py)
    var log = document.body.dataset.log;
    if (!log || document.body.dataset.logScoped !== "yes") return url;
    var hash = url.indexOf("#"), tail = hash >= 0 ? url.slice(hash) : "", head = hash >= 0 ? url.slice(0, hash) : url;
    return head + (head.indexOf("?") >= 0 ? "&" : "?") + "log=" + encodeURIComponent(log) + tail;
  }

  function postJSON(url, csrf, body) {
    url = withLog(url);
    return fetch(url, {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf, "Accept": "application/json" },
      body: JSON.stringify(body)
    }).then(function (r) {
      return r.json().catch(function () { return { detail: "Unexpected answer (HTTP " + r.status + "); sign in again?" }; })
        .then(function (j) { if (!r.ok) throw new Error(j.detail || ("HTTP " + r.status)); return j; });
    });
  }
  function creationOptions(o) {
    o.challenge = unb64url(o.challenge);
    o.user.id = unb64url(o.user.id);
    (o.excludeCredentials || []).forEach(function (c) { c.id = unb64url(c.id); });
    return o;
  }
  function setupPasskeys() {
    var form = document.getElementById("passkey-form");
    if (!form) return;
    var code = document.getElementById("enrol-code");
    var status = document.getElementById("passkey-status");
    var csrf = form.querySelector("[name=csrf]").value;
    try { if (!code.value) code.value = sessionStorage.getItem(CODE_KEY) || ""; } catch (e) { /* storage off */ }
    form.addEventListener("submit", function (ev) {
      ev.preventDefault();
      var button = document.getElementById("passkey-register");
      var value = code.value.trim();
      if (!window.PublicKeyCredential) { say(status, "This browser cannot make passkeys here (WebAuthn needs https or localhost).", "bad"); return; }
      button.disabled = true;
      say(status, "Asking your authenticator for a new passkey…", "");
      postJSON("/account/passkeys/options", csrf, { code: value }).then(function (opts) {
        return navigator.credentials.create({ publicKey: creationOptions(opts.publicKey) });
      }).then(function (cred) {
        var credential = {
          id: cred.id, rawId: b64url(cred.rawId), type: cred.type,
          response: { clientDataJSON: b64url(cred.response.clientDataJSON), attestationObject: b64url(cred.response.attestationObject) },
          clientExtensionResults: cred.getClientExtensionResults ? cred.getClientExtensionResults() : {}
        };
        return postJSON("/account/passkeys", csrf, { code: value, credential: credential });
      }).then(function () {
        try { sessionStorage.removeItem(CODE_KEY); } catch (e) { /* storage off */ }
        window.location.assign(withLog("/account?registered=1#passkeys"));
      }).catch(function (err) {
        button.disabled = false;
        var why = err && err.name === "NotAllowedError" ? "The authenticator did not make a passkey (cancelled or timed out)." : String(err && err.message || err);
        say(status, why, "bad");
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    setupHelp(); setupCopy(); setupQueue(); setupReview(); setupSignIn(); setupPasskeys(); setupDelegations(); setupSignedForms(); setupLive();
  });
  // Pages without a queue or a review still end their live stream on sign-out (the Decided view, the log).
  function setupLive() {
    if (document.getElementById("queue") || document.getElementById("review-data")) return;
    if (!document.querySelector(".who")) return;  // signed out
    if (!document.getElementById("decided") && !document.getElementById("stalled")) return;
    connect({});
  }
  window.signoff = {
    diffPatch: diffPatch, check: check, lineDiff: lineDiff, canonicalJSON: canonicalJSON, digestOf: digestOf,
    // A sealed log's commitments, for tests against signoff.audit.sealing (salts as hex).
    sealing: {
      commit: function (value, saltHex) { return commit(value, unhex(saltHex)); },
      checkShown: checkShown,
      editPatch: function (data, args, saltsHex) {
        var given = {};
        Object.keys(saltsHex || {}).forEach(function (n) { given[n] = unhex(saltsHex[n]); });
        return sealedEdit(data, args, given);
      }
    }
  };
})();
