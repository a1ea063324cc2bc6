// Flotilla's dashboard: the theme applied before first paint (this file is loaded
// in <head>, not deferred), then keyboard shortcuts, the help overlay, copy
// buttons, row filters and logs that follow. Settings live in localStorage.
(function () {
  "use strict";
  var root = document.documentElement;
  function get(k, d) { try { return localStorage.getItem(k) || d; } catch (e) { return d; } }
  function set(k, v) { try { localStorage.setItem(k, v); } catch (e) { /* private mode */ } }
  root.setAttribute("data-theme", get("flotilla.theme", "system"));

  var GO = { o: "/ui/", s: "/ui/sessions", q: "/ui/questions", r: "/ui/releases",
             v: "/ui/revisions", a: "/ui/alerts", k: "/ui/stacks" };

  function applyFilter() {
    var text = document.querySelector("[data-filter]");
    var state = document.querySelector("[data-filter-state]");
    var q = text ? text.value.trim().toLowerCase() : "";
    var s = state ? state.value : "";
    var out = document.querySelector("[data-filter-count]");
    if (!q && !s) {
      // No filter (the usual case, after every live update): only rows still
      // hidden need touching.
      var hidden = document.querySelectorAll("[data-row][hidden]");
      for (var h = 0; h < hidden.length; h++) hidden[h].hidden = false;
      if (out) out.textContent = "";
      return;
    }
    var rows = document.querySelectorAll("[data-row]");
    var shown = 0;
    for (var i = 0; i < rows.length; i++) {
      var r = rows[i];
      var ok = (!q || (r.getAttribute("data-text") || "").indexOf(q) >= 0) &&
               (!s || (" " + (r.getAttribute("data-state") || "") + " ").indexOf(" " + s + " ") >= 0);
      if (r.hidden !== !ok) r.hidden = !ok;
      if (ok) shown++;
    }
    if (out) {
      var paged = document.querySelector("#ov-pager a");
      out.textContent = shown + " of " + rows.length + " shown" +
        (paged ? " on this page (Enter filters all pages)" : "");
    }
  }

  // Ages: each <time class="ago" datetime="…"> shows how long ago it was, by the
  // authority's clock (the page's data-now is its time when it rendered the page).
  var skew = (Number(root.getAttribute("data-now")) || Date.now()) - Date.now();
  function age(ms) {
    var s = Math.max(0, Math.floor(ms / 1000));
    if (s < 60) return s + " s";
    if (s < 3600) return Math.floor(s / 60) + " min";
    if (s < 86400) return Math.floor(s / 3600) + " h";
    return Math.floor(s / 86400) + " d";
  }
  function ages() {
    var now = Date.now() + skew;
    var all = document.querySelectorAll("time.ago");
    for (var i = 0; i < all.length; i++) {
      var t = age(now - Date.parse(all[i].getAttribute("datetime")));
      if (all[i].textContent !== t) all[i].textContent = t;
    }
  }

  function follow(el) {
    return el.scrollTop + el.clientHeight >= el.scrollHeight - 8;
  }

  // A link to the dashboard followed from another site (a notification in a chat
  // app) comes without the SameSite=Strict session cookie and lands on the sign-in
  // page. Go to where it led (the form's `next`, which the authority checked is a
  // dashboard path) once more, now from this site, so the cookie is sent: signed
  // in, the page opens; not, this page comes back and stays. Once per destination
  // per tab; a signed-in page clears the mark.
  function retryFromHere() {
    var next = document.querySelector("form[action='/ui/login'] input[name=next]");
    // Not a one-time link's page, nor the answer to a sign-in that failed.
    if (!next || document.querySelector("form[action='/ui/login'] input[name=credential][type=hidden], [role=alert]")) return false;
    var to = next.value, tried = to;
    try { tried = sessionStorage.getItem("flotilla.retried"); } catch (e) { /* no storage: no retry */ }
    if (tried === to || to.indexOf("/ui") !== 0) return false;
    try { sessionStorage.setItem("flotilla.retried", to); } catch (e) { return false; }
    location.replace(to);
    return true;
  }

  function ready() {
    if (document.querySelector("[data-who]")) {
      try { sessionStorage.removeItem("flotilla.retried"); } catch (e) { /* private mode */ }
    } else if (retryFromHere()) {
      return;
    }
    var theme = document.getElementById("theme");
    if (theme) {
      theme.value = root.getAttribute("data-theme");
      theme.addEventListener("change", function () {
        root.setAttribute("data-theme", theme.value);
        set("flotilla.theme", theme.value);
      });
    }
    var keysOn = get("flotilla.keys", "on") === "on";
    var keys = document.getElementById("keys");
    if (keys) {
      keys.checked = keysOn;
      keys.addEventListener("change", function () {
        keysOn = keys.checked;
        set("flotilla.keys", keysOn ? "on" : "off");
      });
    }
    var help = document.getElementById("help");
    var helpOpen = document.getElementById("help-open");
    if (help && helpOpen) helpOpen.addEventListener("click", function () { help.showModal(); });

    document.addEventListener("click", function (e) {
      var b = e.target.closest ? e.target.closest("[data-copy]") : null;
      if (!b || !navigator.clipboard) return;
      navigator.clipboard.writeText(b.getAttribute("data-copy")).then(function () {
        b.textContent = "Copied";
        setTimeout(function () { b.textContent = "Copy"; }, 1500);
      });
    });

    var text = document.querySelector("[data-filter]");
    var state = document.querySelector("[data-filter-state]");
    if (text) text.addEventListener("input", applyFilter);
    if (state) state.addEventListener("change", applyFilter);
    applyFilter();

    // Logs that follow: a [data-follow] box stays at its end while it is there,
    // and stops following when scrolled up.
    var stuck = new WeakMap();
    document.querySelectorAll("[data-follow]").forEach(function (el) {
      el.scrollTop = el.scrollHeight;
      el.addEventListener("scroll", function () { stuck.set(el, follow(el)); });
    });
    document.body.addEventListener("htmx:beforeSwap", function () {
      document.querySelectorAll("[data-follow]").forEach(function (el) { stuck.set(el, follow(el)); });
    });
    ages();
    setInterval(ages, 1000);
    function afterSwap() {
      applyFilter();
      ages();
      document.querySelectorAll("[data-follow]").forEach(function (el) {
        if (stuck.get(el) !== false) el.scrollTop = el.scrollHeight;
      });
    }
    document.body.addEventListener("htmx:afterSwap", afterSwap);
    document.body.addEventListener("htmx:sseMessage", afterSwap);

    // The page's event stream: when it breaks, say so, and whether it is the
    // authority that cannot be reached or the session that ended (the page is then
    // asked for again without following redirects: a sign-in redirect means it).
    var banner = null;
    function stale(text, link) {
      if (!banner) {
        banner = document.createElement("div");
        banner.className = "stale-banner";
        banner.setAttribute("role", "alert");
        document.body.insertBefore(banner, document.body.firstChild);
      }
      banner.textContent = text + " ";
      if (link) {
        var a = document.createElement("a");
        a.href = link[0];
        a.textContent = link[1];
        banner.appendChild(a);
      }
      banner.hidden = false;
      root.setAttribute("data-stale", "yes");
    }
    document.body.addEventListener("htmx:sseError", function () {
      fetch(location.href, { redirect: "manual", cache: "no-store" }).then(function (r) {
        if (r.type === "opaqueredirect" || r.status === 401) {
          stale("Signed out: this page no longer updates.",
                ["/ui/login?next=" + encodeURIComponent(location.pathname + location.search), "Sign in again"]);
        } else {
          stale("Live updates stopped; reconnecting… What this page shows may be out of date.", null);
        }
      }, function () {
        stale("The authority cannot be reached; reconnecting… What this page shows may be out of date.", null);
      });
    });
    document.body.addEventListener("htmx:sseOpen", function () {
      if (banner) banner.hidden = true;
      root.removeAttribute("data-stale");
    });

    var pending = false;
    document.addEventListener("keydown", function (e) {
      if (!keysOn || e.ctrlKey || e.metaKey || e.altKey) return;
      var t = e.target;
      if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName))) return;
      if (pending) {
        pending = false;
        if (GO[e.key]) { e.preventDefault(); location.href = GO[e.key]; }
        return;
      }
      if (e.key === "g") { pending = true; setTimeout(function () { pending = false; }, 1500); return; }
      if (e.key === "?" && help) { e.preventDefault(); if (help.open) help.close(); else help.showModal(); return; }
      if (e.key === "[" || e.key === "]") {
        var to = document.querySelector(e.key === "[" ? "a[rel=prev]" : "a[rel=next]");
        if (to) { e.preventDefault(); location.href = to.href; }
        return;
      }
      if (e.key === "/") {
        var f = document.querySelector("[data-filter]");
        if (f) { e.preventDefault(); f.focus(); }
      }
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", ready);
  else ready();
})();
