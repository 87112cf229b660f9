// A form with data-confirm="…" asks before it is sent (no inline handler: the CSP allows none).
document.addEventListener("submit", function (e) {
  var message = e.target.getAttribute && e.target.getAttribute("data-confirm");
  if (message && !window.confirm(message)) e.preventDefault();
});
