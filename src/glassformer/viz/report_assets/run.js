/* glassformer run page: one step slider moves the heatmaps, snapshots, norms and chart markers. */
(function () {
  const data = JSON.parse(document.getElementById("gf-run-data").textContent);
  const records = data.records, T = data.labels;
  const fill = (message, fields) => message.replace(/\{(\w+)\}/g, (_, name) => fields[name]);
  const slider = document.getElementById("gf-step");
  const label = document.getElementById("gf-step-label");
  function shade(v, lo, hi) {  // white -> accent blue
    const t = Math.max(0, Math.min(1, (v - lo) / ((hi - lo) || 1)));
    return `rgb(${Math.round(255 - 208 * t)},${Math.round(255 - 160 * t)},${Math.round(255 - 47 * t)})`;
  }
  // rows (a list of lists) as cells of cw x ch pixels, shaded between lo and hi; rowLabels and colLabels
  // are drawn in a margin (every k-th column label when they would overlap)
  function grid(canvas, rows, lo, hi, cw, ch, rowLabels, colLabels) {
    const h = rows.length, w = rows[0].length, left = rowLabels ? 30 : 0, top = colLabels ? 14 : 0;
    canvas.width = left + w * cw; canvas.height = top + h * ch;
    canvas.style.width = `${canvas.width}px`; canvas.style.height = `${canvas.height}px`;
    const ctx = canvas.getContext("2d");
    ctx.fillStyle = "#fbfbfd"; ctx.fillRect(0, 0, canvas.width, canvas.height);
    rows.forEach((row, i) => row.forEach((v, j) => {
      ctx.fillStyle = v === null ? "#eee" : shade(v, lo, hi); ctx.fillRect(left + j * cw, top + i * ch, cw, ch);
    }));
    ctx.font = "10px sans-serif"; ctx.fillStyle = "#5b6475"; ctx.textBaseline = "middle";
    if (rowLabels) {
      ctx.textAlign = "right";
      const every = Math.ceil(11 / ch);
      rowLabels.forEach((t, i) => { if (i % every === 0) ctx.fillText(t, left - 3, top + i * ch + ch / 2); });
    }
    if (colLabels) {
      ctx.textAlign = "center";
      const widest = Math.max(...colLabels.map((t) => ctx.measureText(t).width)) + 6;
      const every = Math.ceil(widest / cw);
      colLabels.forEach((t, j) => { if (j % every === 0) ctx.fillText(t, left + j * cw + cw / 2, 7); });
    }
    if (cw >= 28 && ch >= 18) {
      ctx.font = "11px sans-serif";
      rows.forEach((row, i) => row.forEach((v, j) => {
        if (v === null) return;
        ctx.fillStyle = (v - lo) / ((hi - lo) || 1) > 0.6 ? "#fff" : "#1d2330";
        ctx.fillText(v.toFixed(2), left + j * cw + cw / 2, top + i * ch + ch / 2);
      }));
    }
  }
  const range = (n, f) => Array.from({length: n}, (_, i) => f(i));
  const fixed = (v, digits) => (v === null || v === undefined ? "–" : v.toFixed(digits));  // null: not finite
  const finite = (values) => values.filter((v) => v !== null);
  function heads_cell(n) { return Math.max(10, Math.min(40, Math.floor(560 / n))); }
  function show(index) {
    const r = records[index];
    slider.value = index;
    label.textContent = fill(T.step_of, {step: r.step, n: index + 1, total: records.length});
    document.body.dataset.step = r.step;
    document.querySelectorAll(".gf-heatmap canvas").forEach((c) => {
      const rows = r[c.dataset.kind];
      const hi = c.dataset.kind === "entropy" ? Math.max(1e-9, ...records.map((x) => Math.max(...finite(x.entropy.flat()))))
        : 1;
      const cw = heads_cell(rows[0].length), ch = Math.max(12, Math.min(24, cw));
      grid(c, rows, 0, hi, cw, ch, range(rows.length, (i) => `L${i}`), range(rows[0].length, String));
      c.gfRows = rows; c.gfCell = [cw, ch]; c.gfStep = r.step;
    });
    document.querySelectorAll(".gf-snap canvas").forEach((c) => {
      const rows = r.attention[c.dataset.head];
      const cell = Math.max(4, Math.min(14, Math.floor(320 / rows.length)));
      grid(c, rows, 0, 1, cell, cell);
    });
    const norms = document.getElementById("gf-norm-rows");
    if (norms) {
      norms.innerHTML = r.resid_norm.map((v, i) => `<tr><td>${i < r.weight_norm.length ? fill(T.block, {block: i}) :
        T.after_last}</td><td>${fixed(v, 2)}</td><td>${i < r.weight_norm.length ? fixed(r.weight_norm[i], 2) :
        ""}</td><td>${fixed(r.lens_loss[i], 3)}</td></tr>`).join("");
    }
    document.querySelectorAll("svg.gf-chart:not(.gf-static)").forEach((svg) => {
      const x0 = +svg.dataset.x0, x1 = +svg.dataset.x1, left = +svg.dataset.left, w = +svg.dataset.width;
      const x = left + (r.step - x0) / ((x1 - x0) || 1) * w;
      const m = svg.querySelector(".gf-marker"); m.setAttribute("x1", x); m.setAttribute("x2", x);
    });
    const lens = document.getElementById("gf-lens-canvas");
    if (lens) lens.dataset.step = r.step;
    document.querySelectorAll(".gf-circuit-snap").forEach((f) => { f.hidden = +f.dataset.index !== index; });
  }
  document.querySelectorAll(".gf-heatmap canvas").forEach((c) => c.addEventListener("mousemove", (e) => {
    const box = c.getBoundingClientRect(), [cw, ch] = c.gfCell;
    const i = Math.floor((e.clientY - box.top - 14) / ch), j = Math.floor((e.clientX - box.left - 30) / cw);
    const v = i >= 0 && j >= 0 && c.gfRows[i] ? c.gfRows[i][j] : undefined;
    c.title = v === undefined ? "" : fill(T.tooltip, {kind: T.kinds[c.dataset.kind], step: c.gfStep, layer: i,
                                                        head: j, value: v});
  }));
  const lens = document.getElementById("gf-lens-canvas");
  if (lens && records.length) {  // layers (rows) x steps (columns), loss shaded against its range
    const rows = records[0].lens_loss.map((_, layer) => records.map((r) => r.lens_loss[layer]));
    const all = finite(rows.flat());
    const cw = Math.max(2, Math.min(16, Math.floor(900 / records.length)));
    const ch = Math.max(6, Math.min(20, Math.floor(400 / rows.length)));
    const labels = range(rows.length, (i) => (i < rows.length - 1 ? `L${i}` : "out"));
    grid(lens, rows.map((row) => row.map((v) => (v === null ? null : -v))), -Math.max(...all), -Math.min(...all), cw, ch,
         labels,
         records.map((r) => String(r.step)));
  }
  if (records.length) {
    slider.max = records.length - 1;
    slider.addEventListener("input", () => show(+slider.value));
    show(records.length - 1);
  }
  document.body.dataset.ready = "true";
})();
