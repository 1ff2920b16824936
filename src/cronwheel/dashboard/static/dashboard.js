/* cronwheel dashboard: the only script besides the vendored htmx (the page's
   Content-Security-Policy allows scripts from this origin only, no inline code). */
(function () {
  "use strict";
  function ready(fn) {
    if (document.readyState !== "loading") { fn(); } else { document.addEventListener("DOMContentLoaded", fn); }
  }
  // A filter click supersedes its panel's poll. htmx's own way (hx-sync
  // "replace") aborts the poll's request, and htmx reports every abort as an
  // error in the console. Instead the superseded panel stops polling, its late
  // answer is not shown, and of several quick clicks only the last one's answer
  // is: the page shows what was asked last, and the console stays clean.
  var latestFilter = null;
  function isFilter(elt) { return elt.matches && elt.matches("nav.filters a[hx-get]"); }
  function superseded(elt) { return elt.hasAttribute && elt.hasAttribute("data-superseded"); }
  // the element that made the request (beforeSwap is dispatched on the target)
  function source(ev) {
    var config = ev.detail.requestConfig;
    return (config && config.elt) || ev.detail.elt;
  }
  document.addEventListener("htmx:beforeRequest", function (ev) {
    var elt = ev.detail.elt;
    if (superseded(elt)) { ev.preventDefault(); return; }
    if (!isFilter(elt)) { return; }
    latestFilter = elt;
    var panel = elt.closest("section");
    if (panel) { panel.setAttribute("data-superseded", ""); }
  });
  document.addEventListener("htmx:beforeSwap", function (ev) {
    var elt = source(ev);
    if (superseded(elt) || (isFilter(elt) && elt !== latestFilter)) {
      ev.detail.shouldSwap = false;
    }
  });
  document.addEventListener("htmx:afterRequest", function (ev) {
    // a filter request that failed gives the panel back its poll
    var elt = source(ev);
    if (isFilter(elt) && elt === latestFilter && !ev.detail.successful) {
      var panel = elt.closest("section");
      if (panel) { panel.removeAttribute("data-superseded"); }
    }
  });
  // The new-job form: its fields as JSON (every body here is JSON); a refused field
  // is named beside the form, a created job opens.
  ready(function () {
    var form = document.getElementById("new-job");
    if (!form) { return; }
    form.addEventListener("submit", function (ev) {
      ev.preventDefault();
      var out = document.getElementById("new-job-error");
      var body = {};
      var headers = { "Content-Type": "application/json" };
      Array.prototype.forEach.call(form.elements, function (el) {
        if (!el.name) { return; }
        // the session's CSRF token travels as a header, never among the job's fields
        if (el.name === "csrf_token") { if (el.value) { headers["X-CSRF-Token"] = el.value; } return; }
        if (el.type === "checkbox") { if (el.checked) { body[el.name] = "on"; } return; }
        if (el.value !== "") { body[el.name] = el.value; }
      });
      out.textContent = "";
      fetch("/ui/jobs/new", {
        method: "POST",
        headers: headers,
        credentials: "same-origin",
        body: JSON.stringify(body)
      }).then(function (r) {
        return r.json().then(function (doc) {
          if (r.ok) { window.location.assign(doc.url); return; }
          var e = doc.error || {};
          out.textContent = (e.field ? e.field + ": " : "") + (e.message || "refused");
        });
      }, function () { out.textContent = "The server did not answer."; });
    });
  });
  ready(function () {
    var form = document.getElementById("login-form");
    if (!form) { return; }
    form.addEventListener("submit", function (ev) {
      ev.preventDefault();
      var input = document.getElementById("token");
      var out = document.getElementById("login-error");
      out.textContent = "";
      fetch("/ui/login", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        credentials: "same-origin",
        body: JSON.stringify({ token: input.value })
      }).then(function (r) {
        if (r.ok) { window.location.assign("/"); return; }
        out.textContent = r.status === 401 ? "That token is not valid." : "Enter a token.";
      }, function () { out.textContent = "The server did not answer."; });
    });
  });
})();
