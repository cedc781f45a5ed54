// glassformer attribution graph page: nodes by layer (rows) and position (columns), edges by weight;
// click a node for its details, shift-click nodes and "group" them into a supernode. All text goes in
// through textContent (token strings are data, never markup).
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("gf-graph-data").textContent);
  var svg = document.getElementById("gf-graph-svg");
  var detail = document.getElementById("gf-graph-detail");
  var NS = "http://www.w3.org/2000/svg";
  var T = data.tokens.length, L = data.n_layers;
  var left = 40, top = 20, step = 15, perLine = 3;
  var colW = Math.max(perLine * step + 12, Math.min(90, Math.floor(1100 / Math.max(T, 1))));
  var rows = L + 2;  // embeddings at the bottom, logits at the top
  function row(node) {
    if (node.kind === "token") { return rows - 1; }
    if (node.kind === "logit") { return 0; }
    return rows - 2 - node.layer;
  }
  // nodes of one (row, position) cell sit side by side, three to a line
  var cells = {}, lines = 1;
  data.nodes.forEach(function (n) {
    var key = row(n) + ":" + n.pos;
    (cells[key] = cells[key] || []).push(n);
    lines = Math.max(lines, Math.ceil(cells[key].length / perLine));
  });
  var rowH = Math.max(46, lines * step + 16);
  var width = left + T * colW + 20, height = top + rows * rowH + 40;
  svg.setAttribute("viewBox", "0 0 " + width + " " + height);
  svg.setAttribute("width", String(width));
  svg.setAttribute("height", String(height));
  var byId = {}, groups = [], picked = [];
  function el(name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) { e.setAttribute(k, String(attrs[k])); }
    (parent || svg).appendChild(e);
    return e;
  }
  Object.keys(cells).forEach(function (key) {
    var list = cells[key], n0 = list[0];
    var used = Math.ceil(list.length / perLine);
    list.forEach(function (n, i) {
      var line = Math.floor(i / perLine), inLine = Math.min(perLine, list.length - line * perLine);
      n.x = left + n.pos * colW + colW / 2 + ((i % perLine) - (inLine - 1) / 2) * step;
      n.y = top + row(n0) * rowH + rowH / 2 + (line - (used - 1) / 2) * step;
      byId[n.id] = n;
    });
  });
  var maxW = data.links.reduce(function (m, e) { return Math.max(m, Math.abs(e.w)); }, 1e-12);
  var edgeLayer = el("g", {});
  data.links.forEach(function (e) {
    var s = byId[e.s], t = byId[e.t];
    if (!s || !t) { return; }
    el("line", {"class": "gf-edge", x1: s.x, y1: s.y, x2: t.x, y2: t.y,
                stroke: e.w >= 0 ? "#2563eb" : "#dc2626",
                "stroke-width": (0.3 + 3 * Math.abs(e.w) / maxW).toFixed(2),
                "stroke-opacity": (0.15 + 0.7 * Math.abs(e.w) / maxW).toFixed(2)}, edgeLayer);
  });
  data.tokens.forEach(function (tok, p) {
    var label = el("text", {x: left + p * colW + colW / 2, y: height - 12, "text-anchor": "middle"});
    label.textContent = visible(tok);
  });
  for (var r = 0; r < rows; r++) {
    var name = r === 0 ? "logits" : r === rows - 1 ? "emb" : "L" + (rows - 2 - r);
    el("text", {x: 4, y: top + r * rowH + rowH / 2 + 4}).textContent = name;
  }
  data.nodes.forEach(function (n) {
    var c = el("circle", {"class": "gf-node gf-" + n.kind, cx: n.x, cy: n.y, r: n.kind === "feature" ? 6 : 5,
                          "data-id": n.id});
    el("title", {}, c).textContent = n.label;
    n.circle = c;
    c.addEventListener("click", function (ev) {
      if (ev.shiftKey) { pick(n); } else { show(n); }
    });
  });
  function visible(tok) {  // whitespace made visible, as the other pages show tokens
    return String(tok).replace(/\n/g, "\u21b5").replace(/\t/g, "\u21e5").replace(/\r/g, "\u240d");
  }
  function cellText(parent, tag, text) {
    var e = document.createElement(tag);
    e.textContent = text;
    parent.appendChild(e);
    return e;
  }
  function table(parent, rowsIn) {
    var tb = document.createElement("table");
    rowsIn.forEach(function (r) {
      var tr = document.createElement("tr");
      r.forEach(function (v) { cellText(tr, "td", String(v)); });
      tb.appendChild(tr);
    });
    parent.appendChild(tb);
  }
  function show(n) {
    data.nodes.forEach(function (m) { m.circle.classList.remove("gf-selected"); });
    n.circle.classList.add("gf-selected");
    detail.textContent = "";
    cellText(detail, "h3", n.label);
    var facts = [["kind", n.kind], ["layer", n.layer], ["position", n.pos]];
    if (n.activation !== null && n.activation !== undefined) { facts.push(["activation", n.activation.toFixed(4)]); }
    if (n.influence !== null && n.influence !== undefined) { facts.push(["cumulative influence", n.influence.toFixed(4)]); }
    table(detail, facts);
    var info = data.features[n.id];
    if (info) {
      if (info.top_logits && info.top_logits.length) {
        cellText(detail, "h4", data.labels.promotes);
        table(detail, info.top_logits.map(function (x) { return [x[0], x[1].toFixed(3)]; }));
      }
      if (info.examples && info.examples.length) {
        cellText(detail, "h4", data.labels.examples);
        info.examples.forEach(function (ex) {
          var line = cellText(detail, "div", "");
          line.className = "gf-graph-example";
          ex.tokens.forEach(function (tok, i) {
            var span = cellText(line, "span", visible(tok));
            var v = ex.values[i] / (info.max || 1);
            span.setAttribute("title", ex.values[i].toFixed(3));
            if (v > 0) { span.style.background = "rgba(224,138,44," + Math.min(v, 1).toFixed(2) + ")"; }
            if (i === ex.peak) { span.className = "gf-graph-peak"; }
          });
        });
      }
    }
    var incoming = data.links.filter(function (e) { return e.t === n.id; })
      .sort(function (a, b) { return Math.abs(b.w) - Math.abs(a.w); }).slice(0, 8);
    var outgoing = data.links.filter(function (e) { return e.s === n.id; })
      .sort(function (a, b) { return Math.abs(b.w) - Math.abs(a.w); }).slice(0, 8);
    if (incoming.length) {
      cellText(detail, "h4", data.labels.incoming);
      table(detail, incoming.map(function (e) { return [byId[e.s] ? byId[e.s].label : e.s, e.w.toFixed(4)]; }));
    }
    if (outgoing.length) {
      cellText(detail, "h4", data.labels.outgoing);
      table(detail, outgoing.map(function (e) { return [byId[e.t] ? byId[e.t].label : e.t, e.w.toFixed(4)]; }));
    }
  }
  function pick(n) {
    var at = picked.indexOf(n);
    if (at >= 0) { picked.splice(at, 1); n.circle.classList.remove("gf-picked"); }
    else { picked.push(n); n.circle.classList.add("gf-picked"); }
  }
  var list = document.getElementById("gf-graph-supernodes");
  var nameBox = document.getElementById("gf-graph-group-name");
  document.getElementById("gf-graph-group").addEventListener("click", function () {
    if (picked.length < 2) { return; }
    var label = nameBox.value.trim() || ("group " + (groups.length + 1));
    var members = picked.slice();
    groups.push({label: label, members: members});
    var li = cellText(list, "li", label + ": " + members.map(function (m) { return m.label; }).join(", "));
    li.setAttribute("title", String(members.length) + " nodes");
    var cx = members.reduce(function (a, m) { return a + m.x; }, 0) / members.length;
    var cy = members.reduce(function (a, m) { return a + m.y; }, 0) / members.length;
    var ring = el("circle", {"class": "gf-node gf-super", cx: cx, cy: cy, r: 9, "fill-opacity": 0.6});
    el("title", {}, ring).textContent = label;
    members.forEach(function (m) {
      el("line", {x1: m.x, y1: m.y, x2: cx, y2: cy, stroke: "#9333ea", "stroke-dasharray": "3,2"}, edgeLayer);
      m.circle.classList.remove("gf-picked");
    });
    picked = [];
    nameBox.value = "";
  });
  document.body.dataset.ready = "true";
})();
