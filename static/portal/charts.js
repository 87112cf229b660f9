// Draws every chart of the page from the figure (JSON, in a <script type="application/json">
// beside it) with plotly.js from the installed plotly package: no inline script, so the
// Content-Security-Policy needs no exception.
document.querySelectorAll("[data-figure]").forEach(function (el) {
  var figure = JSON.parse(document.getElementById(el.dataset.figure).textContent);
  var config = Object.assign({ responsive: true, displaylogo: false }, figure.config || {});
  Plotly.newPlot(el, figure.data, figure.layout, config);
});
