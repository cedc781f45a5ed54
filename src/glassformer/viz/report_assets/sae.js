// glassformer SAE feature pages: list, sort, search, and one feature's detail; no network.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("gf-sae-data").textContent);
  const vocab = data.vocab;
  const features = data.features;
  const words = data.labels || {};
  function tr(key, fields) { // the page's language (glassformer.viz.i18n's sae.js.* messages)
    let text = words[key] || key;
    for (const name in fields || {}) text = text.split("{" + name + "}").join(String(fields[name]));
    return text;
  }
  const byId = new Map(features.map((f) => [f.id, f]));
  const list = document.getElementById("gf-sae-list");
  const detail = document.getElementById("gf-sae-feature");
  const search = document.getElementById("gf-sae-search");
  const sort = document.getElementById("gf-sae-sort");
  const count = document.getElementById("gf-sae-count");
  const SHOWN = 400; // list items drawn at once; search narrows the rest
  let current = null;

  function label(id) {
    const text = vocab[String(id)];
    return text === undefined ? String(id) : text;
  }
  function visible(text) {
    return text.replace(/\n/g, "\u21b5").replace(/\t/g, "\u21e5").replace(/\r/g, "\u240d");
  }
  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function peakText(f) {
    return f.contexts.map((c) => label(c.tokens[c.peak])).join("");
  }
  // What a search matches: the id, and the tokens of every context and output list.
  const haystack = new Map(features.map((f) => {
    const words = f.contexts.map((c) => c.tokens.map(label).join("")).join("\u0000");
    const out = (f.up || []).concat(f.down || []).map((p) => label(p[0])).join("\u0000");
    return [f.id, (words + "\u0000" + out).toLowerCase()];
  }));

  function matches(f, query) {
    if (!query) return true;
    const q = query.replace(/^#/, "");
    if (/^\d+$/.test(q) && String(f.id) === q) return true;
    return haystack.get(f.id).includes(query.toLowerCase());
  }

  function ordered() {
    const key = sort.value;
    const copy = features.slice();
    if (key === "max") copy.sort((a, b) => b.max - a.max || a.id - b.id);
    else if (key === "id") copy.sort((a, b) => a.id - b.id);
    else copy.sort((a, b) => b.frequency - a.frequency || a.id - b.id);
    return copy;
  }

  const fixed = (v, digits) => (Number.isFinite(v) ? v.toFixed(digits) : "\u2013");  // null: not finite

  function drawList() {
    const query = search.value.trim();
    const found = ordered().filter((f) => matches(f, query));
    list.replaceChildren();
    for (const f of found.slice(0, SHOWN)) {
      const item = el("li", "gf-sae-item");
      item.dataset.id = String(f.id);
      item.append(el("strong", null, "#" + f.id + " "), el("code", null, visible(peakText(f)).replace(/ /g, "\u2423").slice(0, 24)),
        el("span", "gf-sae-freq", fixed(100 * f.frequency, 2) + "%"));
      if (f.id === current) item.classList.add("gf-active");
      item.addEventListener("click", () => show(f.id));
      list.append(item);
    }
    count.textContent = tr("count", {found: found.length, total: features.length}) +
      (found.length > SHOWN ? tr("first", {n: SHOWN}) : "");
    list.dataset.count = String(found.length);
  }

  function histogram(f) {
    const w = 320, h = 80, n = f.hist.length, top = Math.max(1, ...f.hist);
    const ns = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(ns, "svg");
    svg.setAttribute("class", "gf-sae-hist");
    svg.setAttribute("width", String(w));
    svg.setAttribute("height", String(h + 16));
    f.hist.forEach((c, i) => {
      const r = document.createElementNS(ns, "rect");
      const bh = c ? Math.max(1, (h * Math.log1p(c)) / Math.log1p(top)) : 0;
      r.setAttribute("x", String((i * w) / n));
      r.setAttribute("y", String(h - bh));
      r.setAttribute("width", String(w / n - 1));
      r.setAttribute("height", String(bh));
      const t = document.createElementNS(ns, "title");
      t.textContent = tr("hist_bin", {count: c, low: ((i * f.max) / n).toFixed(2), high: (((i + 1) * f.max) / n).toFixed(2)});
      r.append(t);
      svg.append(r);
    });
    for (const [x, text, anchor] of [[0, "0", "start"], [w, fixed(f.max, 2), "end"]]) {
      const t = document.createElementNS(ns, "text");
      t.setAttribute("x", String(x));
      t.setAttribute("y", String(h + 13));
      t.setAttribute("font-size", "11");
      t.setAttribute("text-anchor", anchor);
      t.textContent = text;
      svg.append(t);
    }
    return svg;
  }

  function context(c, f) {
    const row = el("div", "gf-sae-context");
    c.tokens.forEach((id, i) => {
      const a = c.acts[i] || 0;
      const text = label(id);
      const tok = el("span", "gf-sae-tok", visible(text.trim() === "" && i === c.peak ? text.replace(/ /g, "\u2423") : text));
      if (a > 0) tok.style.background = "rgba(234, 120, 20, " + Math.min(1, a / f.max).toFixed(3) + ")";
      tok.title = tr("activation", {value: a.toFixed(3)});
      tok.dataset.act = String(a);
      if (i === c.peak) tok.classList.add("gf-sae-peak");
      row.append(tok);
    });
    row.append(el("span", "gf-sae-value", (c.acts[c.peak] || 0).toFixed(2)));
    return row;
  }

  function tokenTable(pairs, cls, title) {
    const box = el("div");
    box.append(el("h4", null, title));
    const table = el("table", cls);
    for (const [id, v] of pairs) {
      const row = el("tr");
      row.append(el("td", null, visible(label(id))), el("td", null, (v >= 0 ? "+" : "") + fixed(v, 2)));
      table.append(row);
    }
    box.append(table);
    return box;
  }

  function show(id) {
    const f = byId.get(id);
    if (!f) return;
    current = id;
    for (const item of list.children) item.classList.toggle("gf-active", item.dataset.id === String(id));
    detail.replaceChildren();
    detail.dataset.feature = String(id);
    detail.append(el("h3", null, tr("feature", {id: id})),
      el("p", "gf-caption", tr("fires", {pct: fixed(100 * f.frequency, 3), max: fixed(f.max, 3)})));
    detail.append(el("h4", null, tr("hist")), histogram(f));
    detail.append(el("h4", null, tr("contexts")));
    for (const c of f.contexts) detail.append(context(c, f));
    if (f.up) {
      const logits = el("div", "gf-sae-logits");
      logits.append(tokenTable(f.up, "gf-sae-up", tr("up")),
        tokenTable(f.down, "gf-sae-down", tr("down")));
      detail.append(logits);
    }
    if (location.hash !== "#feature-" + id) history.replaceState(null, "", "#feature-" + id);
  }

  search.addEventListener("input", drawList);
  sort.addEventListener("change", drawList);
  drawList();
  const wanted = /^#feature-(\d+)$/.exec(location.hash);
  if (wanted && byId.has(Number(wanted[1]))) show(Number(wanted[1]));
  else if (features.length) show(ordered()[0].id);
  else detail.textContent = tr("none");
  document.body.dataset.ready = "true";
})();
