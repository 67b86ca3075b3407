// Signoff desk: countdowns, live queue (SSE), the args editor with an RFC 6902 patch preview,
// a before/after diff and a parameter-schema check, passkey registration, and each decision
// signed with the reviewer's passkey over what this page shows (RFC 8785 + WebCrypto SHA-256).
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
  }
  setInterval(tick, 1000);
  document.addEventListener("DOMContentLoaded", tick);

  // -- live updates ----------------------------------------------------------------------
  function connect(handlers) {
    if (!window.EventSource) return;
    var es = new EventSource("/events");
    var live = document.getElementById("live");
    es.addEventListener("hello", function () { if (live) { live.dataset.state = "live"; live.textContent = "live"; } });
    es.onerror = function () { if (live) { live.dataset.state = "connecting"; live.textContent = "reconnecting…"; } };
    Object.keys(handlers).forEach(function (name) {
      es.addEventListener(name, function (ev) { handlers[name](JSON.parse(ev.data)); });
    });
  }

  function cell(text, cls) {
    var td = document.createElement("td");
    if (cls) td.className = cls;
    if (text !== undefined) td.textContent = text;
    return td;
  }

  function setupQueue() {
    var table = document.getElementById("queue");
    if (!table) return;
    var body = document.getElementById("queue-body");
    var count = document.getElementById("pending-count");
    var empty = document.getElementById("queue-empty");
    var wantTool = table.dataset.tool, wantAgent = table.dataset.agent;
    var onLast = table.dataset.last === "yes";
    var pageSize = parseInt(table.dataset.pageSize, 10) || 50;
    function bump(d) { count.textContent = String(Math.max(0, parseInt(count.textContent, 10) + d)); }
    function refreshEmpty() { empty.hidden = body.children.length > 0; }
    connect({
      opened: function (ev) {
        if ((wantTool && ev.tool !== wantTool) || (wantAgent && ev.agent !== wantAgent)) return;
        if (body.querySelector('tr[data-review="' + CSS.escape(ev.review) + '"]')) return;
        bump(1);
        if (!onLast || body.children.length >= pageSize) return;
        var tr = document.createElement("tr");
        tr.dataset.review = ev.review;
        tr.className = "fresh";
        var tool = cell(undefined, "tool");
        var a = document.createElement("a");
        a.href = "/reviews/" + encodeURIComponent(ev.review);
        a.textContent = ev.tool;
        tool.appendChild(a);
        tr.appendChild(tool);
        tr.appendChild(cell(ev.agent || "—"));
        var since = cell(); var s = document.createElement("span");
        s.setAttribute("data-since", ev.opened_at); since.appendChild(s); tr.appendChild(since);
        var dl = cell();
        if (ev.deadline) { var d = document.createElement("span"); d.className = "deadline"; d.setAttribute("data-deadline", ev.deadline); dl.appendChild(d); }
        else { var n = document.createElement("span"); n.className = "muted"; n.textContent = "none"; dl.appendChild(n); }
        tr.appendChild(dl);
        tr.appendChild(cell((ev.frontier || "").slice(0, 8), "mono muted"));
        var go = cell(undefined, "go"); var b = document.createElement("a");
        b.className = "button small"; b.href = a.href; b.textContent = "Review"; go.appendChild(b); tr.appendChild(go);
        body.appendChild(tr);
        refreshEmpty();
        tick();
      },
      closed: function (ev) {
        var tr = body.querySelector('tr[data-review="' + CSS.escape(ev.review) + '"]');
        if (tr) { tr.remove(); bump(-1); refreshEmpty(); }
        else if (!wantTool && !wantAgent) bump(-1);
      }
    });
  }

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
    setupSigning(data);

    document.querySelectorAll(".tab").forEach(function (tab) {
      tab.addEventListener("click", function () {
        document.querySelectorAll(".tab").forEach(function (t) { t.classList.toggle("on", t === tab); });
        document.querySelectorAll(".pane").forEach(function (p) { p.hidden = p.dataset.pane !== tab.dataset.tab; });
      });
    });
    // After a failed edit, open the pane the person was using.
    var err = document.getElementById("decision-error");
    if (err && document.getElementById("edit-form")) {
      var editor0 = document.getElementById("args-editor");
      if (editor0 && !equal(safeParse(editor0.value), data.args)) {
        var t = document.querySelector('.tab[data-tab="edit"]'); if (t) t.click();
      }
    }

    var editor = document.getElementById("args-editor");
    if (editor) {
      var patchField = document.getElementById("patch-field");
      var patchView = document.getElementById("patch-view");
      var diffView = document.getElementById("diff-view");
      var checks = document.getElementById("schema-check");
      var btn = document.getElementById("edit-btn");
      var before = JSON.stringify(canon(data.args), null, 2);
      var update = function () {
        var parsed;
        checks.textContent = "";
        try { parsed = JSON.parse(editor.value); }
        catch (e) {
          var li = document.createElement("div"); li.className = "bad"; li.textContent = "Not valid JSON: " + e.message;
          checks.appendChild(li); btn.disabled = true; patchField.value = ""; return;
        }
        if (!isObj(parsed)) {
          var nb = document.createElement("div"); nb.className = "bad"; nb.textContent = "The args must be a JSON object.";
          checks.appendChild(nb); btn.disabled = true; patchField.value = ""; return;
        }
        var patch = diffPatch(data.args, parsed, "", []);
        patchField.value = JSON.stringify(patch);
        patchView.textContent = JSON.stringify(patch, null, 2);
        diffView.textContent = "";
        if (!patch.length) {
          var s = document.createElement("span"); s.className = "muted"; s.textContent = "No changes yet."; diffView.appendChild(s);
        } else {
          var d = lineDiff(before, JSON.stringify(canon(parsed), null, 2));
          (d || []).forEach(function (line) {
            var sp = document.createElement("span");
            sp.className = line[0] === "+" ? "add" : line[0] === "-" ? "del" : "same";
            sp.textContent = line[0] + " " + line[1];
            diffView.appendChild(sp);
          });
        }
        var errs = data.schema ? check(data.schema, parsed, "", []) : [];
        if (errs.length) {
          errs.forEach(function (m) { var e = document.createElement("div"); e.className = "bad"; e.textContent = "✗ " + m; checks.appendChild(e); });
        } else {
          var ok = document.createElement("div"); ok.className = "ok";
          ok.textContent = data.schema ? "✓ Matches the tool's parameters." : "No parameter schema was given for this tool; the server checks what it can.";
          checks.appendChild(ok);
        }
        btn.disabled = errs.length > 0 || patch.length === 0;
      };
      editor.addEventListener("input", update);
      update();
    }

    // Someone else decided while this page was open.
    connect({
      closed: function (ev) {
        if (ev.review !== data.id || document.getElementById("decision-done")) return;
        var box = document.getElementById("closed-live");
        box.hidden = false;
        box.textContent = "This review was just " + ev.status + " by " + String(ev.actor).replace(/^human:/, "") + ". Your decision would not be recorded.";
        document.querySelectorAll("#decide button[type=submit]").forEach(function (b) { b.disabled = true; });
        var st = document.getElementById("status"); if (st) { st.textContent = ev.status; st.className = "status s-" + ev.status; }
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
      return Promise.resolve({ review: data.id, reason: form.querySelector("[name=reason]").value });
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
    return digestOf(args).then(function (argsDigest) {
      var body = { review: data.id };
      if (patch !== null) body.patch = patch;
      body.args_digest = argsDigest;
      body.rationale = rationale;
      if (payload !== null) body.payload = payload;
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
      form.submit();  // a plain submit: no second "submit" event
    }).catch(function (err) {
      button.disabled = false;
      var why = err && err.name === "NotAllowedError" ? "The passkey did not sign (cancelled or timed out)." : String(err && err.message || err);
      say(status, why + " Nothing was sent; nothing was recorded.", "bad");
    });
  }
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
  function postJSON(url, csrf, body) {
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
        window.location.assign("/account?registered=1#passkeys");
      }).catch(function (err) {
        button.disabled = false;
        var why = err && err.name === "NotAllowedError" ? "The authenticator did not make a passkey (cancelled or timed out)." : String(err && err.message || err);
        say(status, why, "bad");
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () { setupQueue(); setupReview(); setupSignIn(); setupPasskeys(); });
  window.signoff = { diffPatch: diffPatch, check: check, lineDiff: lineDiff, canonicalJSON: canonicalJSON, digestOf: digestOf };
})();
