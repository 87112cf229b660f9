// Draws every chart of the page from the figure (JSON) beside it; plotly.js comes from the
// installed plotly package (served by the portal).
document.querySelectorAll("[data-figure]").forEach(function (el) {
  var figure = JSON.parse(document.getElementById(el.dataset.figure).textContent);
  Plotly.newPlot(el, figure.data, figure.layout, { responsive: true, displaylogo: false });
});
