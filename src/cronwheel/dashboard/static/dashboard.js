/* cronwheel dashboard: the only script besides the vendored htmx (the page's
   Content-Security-Policy allows scripts from this origin only, no inline code). */
(function () {
  "use strict";
  function ready(fn) {
    if (document.readyState !== "loading") { fn(); } else { document.addEventListener("DOMContentLoaded", fn); }
  }
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
