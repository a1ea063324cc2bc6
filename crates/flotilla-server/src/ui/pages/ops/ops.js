// The operational pages: a log box's following/paused state (the dashboard's own
// script keeps a followed box at its end), a "Follow the end" button, and Cancel
// buttons that close a plan.
(function () {
  "use strict";
  function atEnd(el) { return el.scrollTop + el.clientHeight >= el.scrollHeight - 8; }
  function ready() {
    var log = document.querySelector("pre.log[data-follow]");
    var state = document.querySelector("[data-log-state]");
    var button = document.querySelector("[data-log-follow]");
    var following = true;
    function show() {
      if (!state) return;
      state.textContent = following ? "following" : "paused";
      state.setAttribute("data-paused", following ? "no" : "yes");
      if (button) button.hidden = following;
    }
    if (log) {
      log.addEventListener("scroll", function () { following = atEnd(log); show(); });
      document.body.addEventListener("htmx:sseMessage", function () {
        // A resumed stream starts the log afresh: keep what follows its last start.
        var starts = log.querySelectorAll("[data-log-start]");
        var from = starts.length ? starts[starts.length - 1] : null;
        while (from && from.previousSibling) log.removeChild(log.firstChild);
        // The last 5,000 lines (a line is a span and its newline).
        var excess = log.childNodes.length - 10000;
        while (excess-- > 0) log.removeChild(log.firstChild);
        if (following) log.scrollTop = log.scrollHeight;
      });
      if (button) button.addEventListener("click", function () {
        log.scrollTop = log.scrollHeight; following = true; show();
      });
      show();
    }
    document.addEventListener("click", function (e) {
      var b = e.target.closest ? e.target.closest("[data-dismiss]") : null;
      if (!b) return;
      var panel = document.getElementById(b.getAttribute("data-dismiss"));
      if (panel) panel.textContent = "";
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", ready);
  else ready();
})();
