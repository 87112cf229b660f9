// The submit form: offer only the capability classes the chosen queue allows, and show that
// queue's defaults and limits beside the fields.
(function () {
  function sync(form) {
    var queue = form.querySelector("select[name=queue]");
    var capability = form.querySelector("select[name=capability_class]");
    if (!queue || !capability) return;
    var chosen = queue.value;
    capability.querySelectorAll("option[data-queues]").forEach(function (option) {
      var allowed = !chosen || option.dataset.queues.split(" ").indexOf(chosen) >= 0;
      option.hidden = option.disabled = !allowed;
      if (!allowed && option.selected) capability.value = "";
    });
    document.querySelectorAll("[data-terms-for]").forEach(function (terms) {
      terms.hidden = terms.dataset.termsFor !== chosen;
    });
    var max = form.querySelector("[data-terms-for='" + chosen + "']");
    var gpus = form.querySelector("input[name=gpus_per_pod]");
    if (gpus && max && max.dataset.maxGpus) gpus.max = max.dataset.maxGpus;
  }
  function wire() {
    var form = document.getElementById("job-form");
    if (!form) return;
    sync(form);
    form.addEventListener("change", function (e) {
      if (e.target.name === "queue") sync(form);
    });
  }
  // "Use this" beside a "would start sooner" suggestion: the form takes its queue and capability
  // class, and the preview runs again for what is now in the form.
  document.addEventListener("click", function (e) {
    var button = e.target.closest && e.target.closest("button.use-alternative");
    var form = document.getElementById("job-form");
    if (!button || !form) return;
    form.querySelector("select[name=queue]").value = button.dataset.queue;
    sync(form);
    form.querySelector("select[name=capability_class]").value = button.dataset.capability;
    var preview = form.querySelector("button[name=preview]");
    if (preview) preview.click();
  });
  document.addEventListener("DOMContentLoaded", wire);
  document.addEventListener("htmx:afterSwap", wire);
})();
