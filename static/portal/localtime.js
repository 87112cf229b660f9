// Show <time datetime="…"> elements in the viewer's time zone; the UTC value stays on hover.
(function () {
  function localize(root) {
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      var when = new Date(el.getAttribute("datetime"));
      if (isNaN(when)) return;
      if (!el.title) el.title = el.textContent.trim();
      el.textContent = when.toLocaleString([], {
        year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit",
      });
    });
  }
  function nameZone() {
    var zone = document.getElementById("time-zone");
    try {
      var name = Intl.DateTimeFormat().resolvedOptions().timeZone;
      if (zone && name) zone.textContent = "your time zone, " + name.replace(/_/g, " ");
    } catch (e) { /* keep UTC */ }
  }
  document.addEventListener("DOMContentLoaded", function () { nameZone(); localize(document); });
  document.addEventListener("htmx:afterSwap", function (e) { localize(e.target); });
})();
