// Draws every chart of the page from the figure (JSON, in a <script type="application/json">
// beside it) with plotly.js from the installed plotly package: no inline script, so the
// Content-Security-Policy needs no exception. Parts htmx swaps in later are drawn when they
// arrive; each chart is drawn once.
function drawCharts(root) {
  root.querySelectorAll("[data-figure]:not([data-drawn])").forEach(function (el) {
    el.dataset.drawn = "1";
    var figure = JSON.parse(document.getElementById(el.dataset.figure).textContent);
    var config = Object.assign({ responsive: true, displaylogo: false }, figure.config || {});
    Plotly.newPlot(el, figure.data, figure.layout, config);
  });
}
drawCharts(document);
if (window.htmx) {
  htmx.onLoad(drawCharts);
}
