/* The review page's "Witnessed" card: the decision's receipt (c2sp.org/tlog-proof@v1), checked in this
 * browser, never trusted from the server's word:
 *   - the leaf is SHA-256(0x00 || the entry's bytes) (RFC 6962 §2.1), the entry being this review's decision;
 *   - its inclusion path hashes up to the checkpoint's root (RFC 6962 §2.1.1, as RFC 9162 §2.1.3.2 checks it);
 *   - the checkpoint (c2sp.org/tlog-checkpoint) carries the log's Ed25519 note signature (c2sp.org/signed-note,
 *     type 0x01) under the vkey this desk was configured with, and cosignatures (c2sp.org/tlog-cosignature,
 *     cosignature/v1, type 0x04) by the configured witnesses, counted against the quorum.
 * WebCrypto does the SHA-256 and the Ed25519. Any failure says "not verified", with the reason. */
(function () {
  "use strict";
  var card = document.getElementById("witnessed");
  if (!card || card.dataset.covered !== "yes") return;  // not in a checkpoint yet: the page says so itself
  var out = document.getElementById("witnessed-status");
  var enc = new TextEncoder();

  function say(text, cls) { out.textContent = text; out.className = cls; card.dataset.state = cls; }
  function b64(text) {
    if (!/^[A-Za-z0-9+/]*={0,2}$/.test(text) || text.length % 4) throw new Error("bad base64: " + text.slice(0, 20));
    var bin = atob(text), bytes = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    return bytes;
  }
  function cat() {
    var n = 0, i; for (i = 0; i < arguments.length; i++) n += arguments[i].length;
    var outb = new Uint8Array(n), at = 0;
    for (i = 0; i < arguments.length; i++) { outb.set(arguments[i], at); at += arguments[i].length; }
    return outb;
  }
  function same(a, b) { if (a.length !== b.length) return false; for (var i = 0; i < a.length; i++) if (a[i] !== b[i]) return false; return true; }
  function sha256(bytes) { return crypto.subtle.digest("SHA-256", bytes).then(function (d) { return new Uint8Array(d); }); }
  function hex(bytes) { return Array.prototype.map.call(bytes, function (x) { return ("0" + x.toString(16)).slice(-2); }).join(""); }

  // A vkey: <name>+<hex key id>+<base64(type || key)> (signed-note "Verifier keys").
  function vkey(text) {
    var first = text.indexOf("+"), second = text.indexOf("+", first + 1);
    if (first < 1 || second < 0) throw new Error("bad vkey " + text);
    var material = b64(text.slice(second + 1));
    return { name: text.slice(0, first), id: text.slice(first + 1, second), type: material[0], key: material.slice(1) };
  }
  function keyId(v) {
    return sha256(cat(enc.encode(v.name), new Uint8Array([0x0a, v.type]), v.key)).then(function (h) { return hex(h.slice(0, 4)); });
  }
  function ed25519(key, sig, msg) {
    return crypto.subtle.importKey("raw", key, { name: "Ed25519" }, false, ["verify"]).then(function (k) {
      return crypto.subtle.verify({ name: "Ed25519" }, k, sig, msg);
    });
  }

  // RFC 9162 §2.1.3.2: verify an inclusion path for leaf index `index` in a tree of `size`.
  function rootFromPath(index, size, leaf, path) {
    var fn = index, sn = size - 1, r = Promise.resolve(leaf), k = 0;
    if (index >= size) return Promise.reject(new Error("index beyond the tree"));
    function step(rv) {
      if (k === path.length) {
        if (sn !== 0) throw new Error("path too short");
        return rv;
      }
      var p = path[k++];
      if (sn === 0) throw new Error("path too long");
      var next;
      if ((fn & 1) === 1 || fn === sn) {
        next = sha256(cat(new Uint8Array([1]), p, rv));
        if ((fn & 1) === 0) while ((fn & 1) === 0 && fn !== 0) { fn = Math.floor(fn / 2); sn = Math.floor(sn / 2); }
      } else {
        next = sha256(cat(new Uint8Array([1]), rv, p));
      }
      fn = Math.floor(fn / 2); sn = Math.floor(sn / 2);
      return next.then(step);
    }
    return r.then(step);
  }

  function parseReceipt(text) {
    var split = text.indexOf("\n\n");
    if (split < 0) throw new Error("no checkpoint in the receipt");
    var head = text.slice(0, split).split("\n"), note = text.slice(split + 2);
    if (head[0] !== "c2sp.org/tlog-proof@v1") throw new Error("not a c2sp.org/tlog-proof@v1 receipt");
    var at = 1, extra = null;
    if (head[at] && head[at].indexOf("extra ") === 0) { extra = b64(head[at].slice(6)); at++; }
    var m = /^index (0|[1-9][0-9]*)$/.exec(head[at] || "");
    if (!m) throw new Error("no index line");
    return { extra: extra, index: parseInt(m[1], 10), path: head.slice(at + 1).map(b64), note: note };
  }
  function parseNote(note) {
    var split = note.lastIndexOf("\n\n");
    if (split < 0 || note.slice(-1) !== "\n") throw new Error("the checkpoint is not a signed note");
    var body = note.slice(0, split + 1), lines = note.slice(split + 2, -1).split("\n");
    var sigs = lines.map(function (line) {
      var m = /^\u2014 (\S+) ([A-Za-z0-9+/=]+)$/.exec(line);
      if (!m) throw new Error("bad signature line");
      var raw = b64(m[2]);
      return { name: m[1], id: hex(raw.slice(0, 4)), sig: raw.slice(4) };
    });
    var rows = body.slice(0, -1).split("\n");
    if (rows.length < 3 || !/^(0|[1-9][0-9]*)$/.test(rows[1])) throw new Error("bad checkpoint text");
    return { text: enc.encode(body), origin: rows[0], size: parseInt(rows[1], 10), root: b64(rows[2]), sigs: sigs };
  }

  function check(receiptText) {
    var data = card.dataset;
    var r = parseReceipt(receiptText), cp = parseNote(r.note);
    var logKey = vkey(data.logVkey);
    var witnesses = (data.witnesses || "").split(" ").filter(Boolean).map(vkey);
    var quorum = parseInt(data.quorum || "0", 10);
    if (!r.extra) throw new Error("the receipt carries no entry");
    var entry = JSON.parse(new TextDecoder().decode(r.extra));
    if (entry.seq !== r.index || entry.seq !== parseInt(data.seq, 10) || (entry.body || {}).review !== data.review) {
      throw new Error("the receipt proves another entry than this decision");
    }
    if (cp.origin !== logKey.name) throw new Error("the checkpoint is of " + cp.origin + ", not " + logKey.name);
    return sha256(cat(new Uint8Array([0]), r.extra)).then(function (leaf) {
      return rootFromPath(r.index, cp.size, leaf, r.path);
    }).then(function (root) {
      if (!same(root, cp.root)) throw new Error("its inclusion path does not reach the checkpoint's root");
      return keyId(logKey);
    }).then(function (logId) {
      if (logKey.type !== 1 || logId !== logKey.id) throw new Error("the configured log vkey is malformed");
      var mine = cp.sigs.filter(function (s) { return s.name === logKey.name && s.id === logId; });
      if (!mine.length) throw new Error("the checkpoint has no signature by the log key");
      return Promise.all(mine.map(function (s) { return ed25519(logKey.key, s.sig, cp.text); }));
    }).then(function (oks) {
      if (oks.indexOf(false) >= 0) throw new Error("the log's signature on the checkpoint does not verify");
      return Promise.all(witnesses.map(function (w) {
        return keyId(w).then(function (id) {
          if (w.type !== 4 || id !== w.id) return null;
          var theirs = cp.sigs.filter(function (s) { return s.name === w.name && s.id === id; });
          if (!theirs.length) return null;
          return Promise.all(theirs.map(function (s) {
            if (s.sig.length !== 72) return false;
            var ts = 0; for (var i = 0; i < 8; i++) ts = ts * 256 + s.sig[i];
            var msg = cat(enc.encode("cosignature/v1\ntime " + ts + "\n"), cp.text);
            return ed25519(w.key, s.sig.slice(8), msg);
          })).then(function (all) {
            if (all.indexOf(false) >= 0) throw new Error("a cosignature by " + w.name + " does not verify");
            return w.name;
          });
        });
      }));
    }).then(function (names) {
      var by = names.filter(Boolean);
      var where = "In the log at seq " + r.index + "; checkpoint of size " + cp.size;
      if (by.length >= Math.max(quorum, 1)) {
        say(where + ", cosigned by " + by.join(" and ") + ". Checked in this browser.", "good");
      } else {
        say(where + ", signed by the log; cosigned by " + (by.join(" and ") || "no witness") + ", fewer than the " +
            Math.max(quorum, 1) + " needed. Checked in this browser.", "warn");
      }
    });
  }

  fetch(card.dataset.receipt, { credentials: "same-origin" }).then(function (resp) {
    if (resp.status === 404) { say("Not in a checkpoint yet: the log will vouch for it at its next checkpoint.", "muted"); return null; }
    if (!resp.ok) throw new Error("the receipt could not be fetched (HTTP " + resp.status + ")");
    return resp.text();
  }).then(function (text) {
    if (text !== null) return check(text);
  }).catch(function (err) {
    say("Not verified: " + (err && err.message ? err.message : err), "bad");
  });
})();
