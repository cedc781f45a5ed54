/* glassformer report: draws the attention views from the JSON in #gf-data.
   Plain browser JavaScript, no libraries, no network. Weights arrive as one byte each (weight x 255),
   base64-encoded, laid out as [layer][head][query][key]. */
(function () {
  "use strict";

  const DATA = JSON.parse(document.getElementById("gf-data").textContent);
  const T = DATA.labels;     // the page's words in its language (glassformer/viz/i18n.py, the js.* messages)
  const ROW = 22;            // px per token row in the head view (matches --row in the CSS)
  const LINE_AREA = 240;     // px between the two token columns
  const THUMB = 72;          // px of a model-view heatmap
  const MIN_WEIGHT = 0.01;   // lines fainter than this are not drawn
  const MAX_LINES = 6;       // without a focused token: lines drawn per query token and head
  const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf"];

  function headColor(h, n) {
    return n <= PALETTE.length ? PALETTE[h] : "hsl(" + Math.round((h * 360) / n) + ", 65%, 45%)";
  }

  function el(tag, attrs, text) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v; else node.setAttribute(k, v);
    }
    if (text !== undefined) node.textContent = text;
    return node;
  }

  /* Whitespace made visible: a space-only token shows as ␣, newlines as ↵, tabs as ⇥. */
  function shown(token) {
    const t = token.replace(/\n/g, "↵").replace(/\t/g, "⇥").replace(/\r/g, "␍");
    return /^ +$/.test(t) ? t.replace(/ /g, "␣") : t;
  }

  /* 0..1 -> white .. dark blue. The colour follows the square root of the weight, so that the small
     weights of a long, spread-out row stay visible (0.25 is already half-dark). */
  function blues(w) {
    const s = Math.sqrt(w);
    return [255 - s * 247, 255 - s * 207, 255 - s * 148];
  }

  class Weights {
    constructor(spec) {
      const raw = atob(spec.weights);
      this.bytes = new Uint8Array(raw.length);
      for (let i = 0; i < raw.length; i++) this.bytes[i] = raw.charCodeAt(i);
      this.L = spec.n_layers; this.H = spec.n_heads;
      this.Tq = spec.query_tokens.length; this.Tk = spec.key_tokens.length;
      if (this.bytes.length !== this.L * this.H * this.Tq * this.Tk) {
        throw new Error("attention data of view " + spec.key + " has the wrong size");
      }
    }
    get(l, h, i, j) {
      return this.bytes[((l * this.H + h) * this.Tq + i) * this.Tk + j] / 255;
    }
  }

  function tokenClasses(spec, side, i) {
    const pad = side === "q" ? spec.query_pad : spec.key_pad;
    const classes = ["gf-tok"];
    const p = spec.prefix_len;
    if (pad[i]) classes.push("gf-pad");
    else if (p !== null && i < p) classes.push("gf-prefix");
    if (p !== null && p > 0 && i === p - 1) classes.push("gf-boundary");
    return classes.join(" ");
  }

  function tokenColumn(spec, side) {
    const tokens = side === "q" ? spec.query_tokens : spec.key_tokens;
    const col = el("div", { class: "gf-col " + (side === "q" ? "gf-queries" : "gf-keys") });
    tokens.forEach((tok, i) => {
      const pad = (side === "q" ? spec.query_pad : spec.key_pad)[i];
      const div = el("div", { class: tokenClasses(spec, side, i), "data-index": String(i),
        title: (pad ? T.padding_title : "") + T.position + i + ": " + JSON.stringify(tok) },
      shown(tok));
      col.appendChild(div);
    });
    return col;
  }

  function legend(spec) {
    const box = el("div", { class: "gf-legend" });
    const cross = spec.key === "cross";
    box.appendChild(el("span", {}, T.left + (cross ? T.target_queries : T.tokens_queries) +
      T.right + (cross ? T.source_keys : T.tokens_keys) + T.links_before + MAX_LINES + T.links_after));
    if (spec.prefix_len !== null) {
      const s = el("span"); s.appendChild(el("span", { class: "gf-swatch", style: "background: var(--prefix)" }));
      s.appendChild(document.createTextNode(T.prefix_before + spec.prefix_len + T.prefix_after));
      box.appendChild(s);
    }
    if (spec.query_pad.some(Boolean) || spec.key_pad.some(Boolean)) {
      const s = el("span");
      s.appendChild(el("span", { class: "gf-swatch",
        style: "background: repeating-linear-gradient(45deg,#f1f2f4,#f1f2f4 3px,#d3d6db 3px,#d3d6db 6px)" }));
      s.appendChild(document.createTextNode(T.padding));
      box.appendChild(s);
    }
    return box;
  }

  /* Head view: one layer; a line from each query token to each key token, weight as opacity. */
  function headView(spec, W) {
    const root = el("div", { class: "gf-headview" });
    root.appendChild(el("h3", {}, T.head_view));
    const state = { layer: 0, heads: new Set([...Array(W.H).keys()]), focus: null, pinned: null };
    const controls = el("div", { class: "gf-controls" });
    const label = el("label", {}, T.layer);
    const select = el("select", { class: "gf-layer" });
    for (let l = 0; l < W.L; l++) select.appendChild(el("option", { value: String(l) }, String(l)));
    label.appendChild(select);
    controls.appendChild(label);
    controls.appendChild(el("span", {}, T.heads));
    const buttons = [];
    for (let h = 0; h < W.H; h++) {
      const b = el("button", { class: "gf-head gf-on", "data-head": String(h), style: "--c: " + headColor(h, W.H),
        title: T.toggle_head + h }, String(h));
      b.addEventListener("click", () => {
        if (state.heads.has(h)) state.heads.delete(h); else state.heads.add(h);
        draw();
      });
      buttons.push(b);
      controls.appendChild(b);
    }
    const all = el("button", { class: "gf-small gf-all" }, T.all);
    const none = el("button", { class: "gf-small gf-none" }, T.none);
    all.addEventListener("click", () => { buttons.forEach((_, h) => state.heads.add(h)); draw(); });
    none.addEventListener("click", () => { state.heads.clear(); draw(); });
    controls.append(all, none);
    root.appendChild(controls);
    root.appendChild(legend(spec));

    const scroll = el("div", { class: "gf-scroll" });
    const columns = el("div", { class: "gf-columns" });
    const queries = tokenColumn(spec, "q");
    const keys = tokenColumn(spec, "k");
    const canvas = el("canvas", { class: "gf-lines" });
    const height = Math.max(W.Tq, W.Tk) * ROW;
    const dpr = window.devicePixelRatio || 1;
    canvas.width = LINE_AREA * dpr; canvas.height = height * dpr;
    canvas.style.width = LINE_AREA + "px"; canvas.style.height = height + "px";
    columns.append(queries, canvas, keys);
    scroll.appendChild(columns);
    root.appendChild(scroll);
    const ctx = canvas.getContext("2d");

    function draw() {
      const focus = state.pinned || state.focus;
      const heads = [...state.heads].sort((a, b) => a - b);
      buttons.forEach((b, h) => b.classList.toggle("gf-on", state.heads.has(h)));
      root.dataset.layer = String(state.layer);
      root.dataset.activeHeads = heads.join(",");
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.clearRect(0, 0, LINE_AREA, height);
      const keyMass = new Float32Array(W.Tk);
      const queryMass = new Float32Array(W.Tq);
      // Collect the lines first: without a focused token, only the MAX_LINES strongest of each query
      // row and head (long inputs would otherwise need T² strokes per head).
      const lines = [];
      for (const h of heads) {
        for (let i = 0; i < W.Tq; i++) {
          if (focus && focus.side === "q" && focus.index !== i) continue;
          const row = [];
          for (let j = 0; j < W.Tk; j++) {
            if (focus && focus.side === "k" && focus.index !== j) continue;
            const w = W.get(state.layer, h, i, j);
            if (focus) { keyMass[j] += w / heads.length; queryMass[i] += w / heads.length; }
            if (w >= MIN_WEIGHT) row.push([w, j]);
          }
          if (!focus && row.length > MAX_LINES) row.sort((a, b) => b[0] - a[0]).length = MAX_LINES;
          for (const [w, j] of row) lines.push([h, i, j, w]);
        }
      }
      // Thin lines rasterise much faster in software; use them when there are many.
      ctx.lineWidth = lines.length > 2000 ? 1 : 1.6;
      for (const [h, i, j, w] of lines) {
        ctx.strokeStyle = headColor(h, W.H);
        ctx.globalAlpha = w;
        ctx.beginPath();
        ctx.moveTo(0, i * ROW + ROW / 2);
        ctx.lineTo(LINE_AREA, j * ROW + ROW / 2);
        ctx.stroke();
      }
      root.dataset.lines = String(lines.length);
      ctx.globalAlpha = 1;
      // With a focused token, shade the tokens on the other side by their (head-averaged) weight.
      [...keys.children].forEach((node, j) => {
        node.classList.toggle("gf-focus", !!focus && focus.side === "k" && focus.index === j);
        node.style.backgroundColor = focus && focus.side === "q" ? "rgba(47, 95, 208, " + keyMass[j] + ")" : "";
      });
      [...queries.children].forEach((node, i) => {
        node.classList.toggle("gf-focus", !!focus && focus.side === "q" && focus.index === i);
        node.style.backgroundColor = focus && focus.side === "k" ? "rgba(47, 95, 208, " + queryMass[i] + ")" : "";
      });
    }

    function bind(column, side) {
      [...column.children].forEach((node, index) => {
        node.addEventListener("mouseenter", () => { state.focus = { side, index }; draw(); });
        node.addEventListener("mouseleave", () => { state.focus = null; draw(); });
        node.addEventListener("click", () => {
          const same = state.pinned && state.pinned.side === side && state.pinned.index === index;
          state.pinned = same ? null : { side, index };
          draw();
        });
      });
    }
    bind(queries, "q"); bind(keys, "k");
    select.addEventListener("change", () => { state.layer = Number(select.value); draw(); });
    draw();
    return root;
  }

  /* One heatmap (queries down, keys across) drawn into ctx at (x, y) with size (w, h). */
  function heatmap(ctx, spec, W, l, h, x, y, w, hgt) {
    const image = new ImageData(W.Tk, W.Tq);
    for (let i = 0; i < W.Tq; i++) {
      for (let j = 0; j < W.Tk; j++) {
        const [r, g, b] = blues(W.get(l, h, i, j));
        const padded = spec.query_pad[i] || spec.key_pad[j];
        const o = 4 * (i * W.Tk + j);
        image.data[o] = padded ? 0.6 * r + 0.4 * 150 : r;
        image.data[o + 1] = padded ? 0.6 * g + 0.4 * 150 : g;
        image.data[o + 2] = padded ? 0.6 * b + 0.4 * 150 : b;
        image.data[o + 3] = 255;
      }
    }
    const off = document.createElement("canvas");
    off.width = W.Tk; off.height = W.Tq;
    off.getContext("2d").putImageData(image, 0, 0);
    ctx.imageSmoothingEnabled = W.Tk > w || W.Tq > hgt;
    ctx.drawImage(off, x, y, w, hgt);
    const p = spec.prefix_len;
    if (p !== null && p > 0) {
      ctx.strokeStyle = "#d2392b"; ctx.lineWidth = Math.max(1, w / 150);
      ctx.beginPath();
      ctx.moveTo(x + (p * w) / W.Tk, y); ctx.lineTo(x + (p * w) / W.Tk, y + hgt);
      if (p < W.Tq) { ctx.moveTo(x, y + (p * hgt) / W.Tq); ctx.lineTo(x + w, y + (p * hgt) / W.Tq); }
      ctx.stroke();
    }
  }

  /* Model view: a layers x heads grid of heatmaps; clicking one enlarges it below the grid. */
  function modelView(spec, W) {
    const root = el("div", { class: "gf-modelview" });
    root.appendChild(el("h3", {}, T.model_view));
    root.appendChild(el("p", { class: "gf-caption" }, T.grid_caption));
    const table = el("table", { class: "gf-grid" });
    const head = el("tr");
    head.appendChild(el("th"));
    for (let h = 0; h < W.H; h++) head.appendChild(el("th", {}, T.head + h));
    table.appendChild(head);
    const zoom = el("div", { class: "gf-zoom", hidden: "" });
    const dpr = window.devicePixelRatio || 1;
    const thumbs = [];
    for (let l = 0; l < W.L; l++) {
      const row = el("tr");
      row.appendChild(el("th", {}, T.layer_lower + l));
      for (let h = 0; h < W.H; h++) {
        const c = el("canvas", { class: "gf-thumb", "data-layer": String(l), "data-head": String(h),
          title: T.layer_lower + l + " · " + T.head + h + T.click_enlarge });
        c.width = THUMB * dpr; c.height = THUMB * dpr;
        heatmap(c.getContext("2d"), spec, W, l, h, 0, 0, c.width, c.height);
        c.addEventListener("click", () => {
          thumbs.forEach((t) => t.classList.toggle("gf-selected", t === c));
          showZoom(zoom, spec, W, l, h);
        });
        thumbs.push(c);
        const td = el("td"); td.appendChild(c); row.appendChild(td);
      }
      table.appendChild(row);
    }
    const scroll = el("div", { class: "gf-grid-scroll" });
    scroll.appendChild(table);
    root.append(scroll, zoom);
    return root;
  }

  function showZoom(zoom, spec, W, l, h) {
    zoom.replaceChildren();
    zoom.hidden = false;
    zoom.dataset.layer = String(l); zoom.dataset.head = String(h);
    zoom.appendChild(el("h3", {}, T.zoom_layer + l + T.zoom_head + h));
    const cell = Math.max(6, Math.min(28, Math.floor(640 / Math.max(W.Tq, W.Tk))));
    const font = Math.min(12, cell - 2);
    const fontSpec = font + "px ui-monospace, 'DejaVu Sans Mono', 'Noto Sans CJK SC', monospace";
    const measure = document.createElement("canvas").getContext("2d");
    measure.font = fontSpec;
    const labels = cell >= 8;
    const widest = labels ? Math.min(140, Math.max(16, ...spec.query_tokens.concat(spec.key_tokens)
      .map((t) => measure.measureText(shown(t)).width)) + 10) : 4;
    const left = widest, top = widest, w = W.Tk * cell, hgt = W.Tq * cell;
    const dpr = window.devicePixelRatio || 1;
    const canvas = el("canvas", { class: "gf-zoom-canvas" });
    canvas.width = (left + w + 4) * dpr; canvas.height = (top + hgt + 4) * dpr;
    canvas.style.width = left + w + 4 + "px"; canvas.style.height = top + hgt + 4 + "px";
    const ctx = canvas.getContext("2d");
    ctx.scale(dpr, dpr);
    heatmap(ctx, spec, W, l, h, left, top, w, hgt);
    if (labels) {
      ctx.font = fontSpec; ctx.fillStyle = "#1d2330"; ctx.textBaseline = "middle";
      ctx.textAlign = "right";
      spec.query_tokens.forEach((t, i) => {
        ctx.fillStyle = spec.query_pad[i] ? "#9aa0aa" : "#1d2330";
        ctx.fillText(shown(t), left - 4, top + i * cell + cell / 2, widest - 6);
      });
      spec.key_tokens.forEach((t, j) => {
        ctx.save();
        ctx.translate(left + j * cell + cell / 2, top - 4);
        ctx.rotate(-Math.PI / 2);
        ctx.textAlign = "left";
        ctx.fillStyle = spec.key_pad[j] ? "#9aa0aa" : "#1d2330";
        ctx.fillText(shown(t), 0, 0, widest - 6);
        ctx.restore();
      });
    }
    const readout = el("div", { class: "gf-readout" }, T.point);
    canvas.addEventListener("mousemove", (event) => {
      const rect = canvas.getBoundingClientRect();
      const j = Math.floor((event.clientX - rect.left - left) / cell);
      const i = Math.floor((event.clientY - rect.top - top) / cell);
      if (i < 0 || j < 0 || i >= W.Tq || j >= W.Tk) return;
      readout.textContent = T.query + i + " " + JSON.stringify(spec.query_tokens[i]) + T.key + j + " " +
        JSON.stringify(spec.key_tokens[j]) + ": " + W.get(l, h, i, j).toFixed(3);
    });
    const scroll = el("div", { class: "gf-zoom-scroll" });
    scroll.appendChild(canvas);
    zoom.append(scroll, readout);
  }

  function build() {
    const container = document.getElementById("gf-views");
    const tabs = [...document.querySelectorAll(".gf-tab")];
    const panes = DATA.views.map((spec, n) => {
      const W = new Weights(spec);
      const pane = el("div", { class: "gf-view", "data-view": spec.key, "data-layers": String(W.L),
        "data-heads": String(W.H), "data-queries": String(W.Tq), "data-keys": String(W.Tk) });
      pane.appendChild(el("p", { class: "gf-caption" }, spec.caption));
      pane.appendChild(headView(spec, W));
      pane.appendChild(modelView(spec, W));
      if (n > 0) pane.hidden = true;
      container.appendChild(pane);
      return pane;
    });
    tabs.forEach((tab, n) => {
      tab.classList.toggle("gf-active", n === 0);
      tab.addEventListener("click", () => {
        tabs.forEach((t, m) => t.classList.toggle("gf-active", m === n));
        panes.forEach((p, m) => { p.hidden = m !== n; });
      });
    });
    document.body.dataset.ready = "true";
  }

  build();
})();
