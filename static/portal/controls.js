// The page's small controls, without inline handlers (the Content-Security-Policy allows none):
// the phone navigation's Menu button and the copy button beside a new API token.
document.addEventListener("click", function (e) {
  var toggle = e.target.closest && e.target.closest(".menu-toggle");
  if (toggle) {
    var open = toggle.getAttribute("aria-expanded") !== "true";
    toggle.setAttribute("aria-expanded", open);
    document.body.classList.toggle("nav-open", open);
    return;
  }
  var copy = e.target.closest && e.target.closest("[data-copy]");
  if (copy) {
    var text = document.getElementById(copy.getAttribute("data-copy")).textContent;
    navigator.clipboard.writeText(text).then(
      function () { copy.textContent = "Copied"; },
      function () { copy.textContent = "Select and copy it by hand"; }
    );
  }
});
