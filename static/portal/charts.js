// Draws every chart of the page from the figure (JSON, in a <script type="application/json">
// beside it) with plotly.js from the installed plotly package: no inline script, so the
// Content-Security-Policy needs no exception. Parts htmx swaps in later are drawn when they
// arrive; each chart is drawn once.

// A title longer than the chart is wide (a phone) is wrapped at spaces, and the top margin
// grows by a line for each line added: plotly cuts a long title off at the chart's edge.
function fitTitle(layout, width) {
  var title = layout.title;
  var text = title && (typeof title === "string" ? title : title.text);
  if (!text || text.indexOf("<br>") >= 0) {
    return;
  }
  var perLine = Math.max(16, Math.floor((width - 40) / 9));
  if (text.length <= perLine) {
    return;
  }
  var lines = [];
  var line = "";
  text.split(" ").forEach(function (word) {
    if (line && (line + " " + word).length > perLine) {
      lines.push(line);
      line = word;
    } else {
      line = line ? line + " " + word : word;
    }
  });
  lines.push(line);
  layout.title = Object.assign({}, typeof title === "string" ? {} : title, {
    text: lines.join("<br>"),
  });
  layout.margin = Object.assign({}, layout.margin || {});
  layout.margin.t = (layout.margin.t || 80) + 20 * (lines.length - 1) + 8;
}

// A figure without a single point (a month nobody used, a queue with no waits yet) says so in
// words instead of drawing bare axes from -1 to 6 that read like numbers.
function hasPoints(figure) {
  return (figure.data || []).some(function (trace) {
    return ["x", "y", "values", "z"].some(function (key) {
      return trace[key] && trace[key].length > 0;
    });
  });
}

function sayNoData(layout) {
  layout.xaxis = Object.assign({}, layout.xaxis || {}, { visible: false });
  layout.yaxis = Object.assign({}, layout.yaxis || {}, { visible: false });
  layout.showlegend = false;
  layout.annotations = [
    {
      text: "No data for this period",
      showarrow: false,
      xref: "paper",
      yref: "paper",
      x: 0.5,
      y: 0.5,
      font: { size: 14, color: "#667085" },
    },
  ];
}

function drawCharts(root) {
  root.querySelectorAll("[data-figure]:not([data-drawn])").forEach(function (el) {
    // A chart in a folded part (<details>) is drawn when it is opened: folded, it has no width.
    var folded = el.closest("details:not([open])");
    if (folded) {
      return;
    }
    el.dataset.drawn = "1";
    var figure = JSON.parse(document.getElementById(el.dataset.figure).textContent);
    var config = Object.assign({ responsive: true, displaylogo: false }, figure.config || {});
    var layout = figure.layout || {};
    fitTitle(layout, el.clientWidth || 600);
    if (!hasPoints(figure)) {
      sayNoData(layout);
      el.dataset.empty = "1";
    } else {
      // Every chart counts something that is never negative (GPUs, hours, money, waits): an
      // axis below zero (all zeros draw from -1) reads as a number that cannot be.
      layout.yaxis = Object.assign({ rangemode: "tozero" }, layout.yaxis || {});
    }
    Plotly.newPlot(el, figure.data, layout, config);
  });
}
drawCharts(document);
document.addEventListener(
  "toggle",
  function (event) {
    if (event.target.open) {
      drawCharts(event.target);
    }
  },
  true,
);
if (window.htmx) {
  htmx.onLoad(drawCharts);
}
