/* A small SVG chart for the counters-tasks dashboard (no dependencies, MIT like the package).
 * Charts.render(element, {labels: [...], series: [{name, values, kind: "bar"|"line", color, shown}]})
 * draws bars and lines on one y axis starting at 0. Every bar and point carries data-series,
 * data-index and data-value, so what is drawn can be checked against the data; a line's point
 * says its value on hover, or shown[i] when given (a UV's mark: "≈53 ±0.8%"). */
(function (global) {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";

  function el(name, attrs, parent) {
    var node = document.createElementNS(NS, name);
    for (var key in attrs) node.setAttribute(key, attrs[key]);
    if (parent) parent.appendChild(node);
    return node;
  }

  function niceMax(value) {
    if (value <= 0) return 1;
    var step = Math.pow(10, Math.floor(Math.log10(value)));
    var options = [1, 2, 2.5, 5, 10];
    for (var i = 0; i < options.length; i++) if (options[i] * step >= value) return options[i] * step;
    return 10 * step;
  }

  function render(container, data) {
    var width = container.clientWidth || 640, height = container.clientHeight || 220;
    var left = 48, right = 12, top = 12, bottom = 28;
    var plotW = Math.max(10, width - left - right), plotH = Math.max(10, height - top - bottom);
    var labels = data.labels || [], series = data.series || [], n = labels.length;
    var low = 0, high = 0;
    series.forEach(function (s) { s.values.forEach(function (v) { high = Math.max(high, v); low = Math.min(low, v); }); });
    high = niceMax(high);
    var span = high - low || 1;
    var y = function (v) { return top + plotH - (v - low) / span * plotH; };
    var slot = n ? plotW / n : plotW;
    var x = function (i) { return left + slot * (i + 0.5); };

    container.textContent = "";
    var svg = el("svg", {width: width, height: height, viewBox: "0 0 " + width + " " + height, class: "chart",
                         role: "img", "data-points": n}, container);
    [low, (low + high) / 2, high].forEach(function (v) {
      el("line", {x1: left, x2: left + plotW, y1: y(v), y2: y(v), class: "grid"}, svg);
      el("text", {x: left - 6, y: y(v) + 4, "text-anchor": "end", class: "tick"}, svg).textContent = format(v);
    });
    var every = Math.max(1, Math.ceil(n / 6));
    labels.forEach(function (label, i) {
      if (i % every === 0 || i === n - 1) {
        el("text", {x: x(i), y: height - 8, "text-anchor": "middle", class: "tick"}, svg).textContent = label;
      }
    });
    var bars = series.filter(function (s) { return (s.kind || "bar") === "bar"; });
    var barW = Math.max(1, slot * 0.8 / Math.max(1, bars.length));
    series.forEach(function (s, si) {
      var color = s.color || ["#4c78a8", "#f58518", "#54a24b"][si % 3];
      if ((s.kind || "bar") === "bar") {
        var bi = bars.indexOf(s);
        s.values.forEach(function (v, i) {
          var y0 = y(Math.max(v, 0)), y1 = y(Math.min(v, 0));
          var rect = el("rect", {x: left + slot * i + slot * 0.1 + bi * barW, y: y0, width: barW,
                                 height: Math.max(v === 0 ? 0 : 1, y1 - y0), fill: color,
                                 "data-series": s.name, "data-index": i, "data-value": v}, svg);
          el("title", {}, rect).textContent = labels[i] + ": " + s.name + " " + v;
        });
      } else {
        var d = s.values.map(function (v, i) { return (i ? "L" : "M") + x(i) + " " + y(v); }).join(" ");
        el("path", {d: d, fill: "none", stroke: color, "stroke-width": 2}, svg);
        s.values.forEach(function (v, i) {
          var dot = el("circle", {cx: x(i), cy: y(v), r: 3, fill: color, "data-series": s.name,
                                  "data-index": i, "data-value": v}, svg);
          el("title", {}, dot).textContent = labels[i] + ": " + s.name + " " + (s.shown ? s.shown[i] : v);
        });
      }
    });
    var lx = left + 4;
    series.forEach(function (s, si) {
      var color = s.color || ["#4c78a8", "#f58518", "#54a24b"][si % 3];
      el("rect", {x: lx, y: top, width: 10, height: 10, fill: color}, svg);
      var t = el("text", {x: lx + 14, y: top + 9, class: "legend"}, svg);
      t.textContent = s.name;
      lx += 24 + 7 * s.name.length;
    });
    return svg;
  }

  function format(v) {
    if (Math.abs(v) >= 1e6) return (v / 1e6).toFixed(1).replace(/\.0$/, "") + "M";
    if (Math.abs(v) >= 1e4) return (v / 1e3).toFixed(1).replace(/\.0$/, "") + "k";
    return String(Math.round(v * 100) / 100);
  }

  global.Charts = {render: render, format: format};
})(window);
