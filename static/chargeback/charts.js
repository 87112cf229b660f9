// Draws every chart of the page from the figure (JSON) beside it; plotly.js comes from the
// installed plotly package (served by the portal). Parts htmx swaps in later are drawn when they
// arrive; each chart is drawn once.
function drawCharts(root) {
  root.querySelectorAll("[data-figure]:not([data-drawn])").forEach(function (el) {
    el.dataset.drawn = "1";
    var figure = JSON.parse(document.getElementById(el.dataset.figure).textContent);
    Plotly.newPlot(el, figure.data, figure.layout, { responsive: true, displaylogo: false });
  });
}
drawCharts(document);
if (window.htmx) {
  htmx.onLoad(drawCharts);
}
