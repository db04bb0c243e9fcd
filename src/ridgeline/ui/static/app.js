// ridgeline ui: plain JS, no library, no build step. Talks only to this server's /api.
"use strict";

const $ = (id) => document.getElementById(id);
const SVGNS = "http://www.w3.org/2000/svg";
// matplotlib's tab20, dark shades first (the same order as the report's plots).
const OP_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
  "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896",
  "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5"];
const ROOF_DASH = {fp32: "8 3 2 3", bf16: "", fp8: "6 4", fp4: "2 2"};
const state = {config: null, configName: null, seq: 0, timer: null};

// Sliders are logarithmic: batch = 2^(s/100) (1..1024), prompt = 16 * 2^(s/100) (16..128k).
function batchFromSlider(s) { return Math.max(1, Math.round(Math.pow(2, s / 100))); }
function promptFromSlider(s) { return Math.max(1, Math.round(16 * Math.pow(2, s / 100))); }

function sig(x, digits = 4) {
  if (x === null || x === undefined || !isFinite(x)) return "—";
  if (Math.abs(x) >= 10000) return Math.round(x).toLocaleString("en-US");
  return String(Number(x.toPrecision(digits)));
}
function human(x) {
  const units = [[1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
  for (const [d, s] of units) if (Math.abs(x) >= d) return sig(x / d, 3) + s;
  return sig(x, 3);
}

async function api(path, body) {
  const opts = body === undefined ? {} : {method: "POST",
    headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)};
  const r = await fetch(path, opts);
  const data = await r.json();
  if (!r.ok) throw new Error(data.error || r.statusText);
  return data;
}

function fillSelect(sel, values, chosen, labels) {
  sel.innerHTML = "";
  values.forEach((v, i) => {
    const o = document.createElement("option");
    o.value = v;
    o.textContent = labels ? labels[i] : (v === "" ? "(same as weights)" : v);
    if (v === chosen) o.selected = true;
    sel.appendChild(o);
  });
}

function params() {
  const p = {
    hardware: $("hardware").value, weights: $("weights").value, kv: $("kv").value || null,
    activations: $("activations").value, tp: Number($("tp").value), pp: Number($("pp").value),
    ep: Number($("ep").value), batch: batchFromSlider(Number($("batch").value)),
    prompt: promptFromSlider(Number($("prompt").value)), output: Number($("output").value),
  };
  if (state.config) { p.config = state.config; p.config_name = state.configName; }
  else p.model = $("model").value;
  return p;
}

function setStatus(text, isError) {
  const s = $("status");
  s.textContent = text;
  s.className = isError ? "error" : "muted";
}

function scheduleUpdate() {
  $("batch-value").textContent = batchFromSlider(Number($("batch").value));
  $("prompt-value").textContent = promptFromSlider(Number($("prompt").value));
  clearTimeout(state.timer);
  state.timer = setTimeout(update, 30);
}

async function update() {
  const seq = ++state.seq;
  const p = params();
  try {
    const v = await api("/api/estimate", p);
    if (seq !== state.seq) return;  // a newer request is on its way: drop this answer
    render(v, p);
    setStatus("");
  } catch (e) {
    if (seq === state.seq) setStatus(e.message, true);
  }
}

function setCard(id, text, value) {
  const el = $(id);
  el.textContent = text;
  if (value !== undefined) el.dataset.value = String(value);
}

function render(v, p) {
  const s = v.summary;
  setCard("tpot", sig(s.tpot_ms) + " ms", s.tpot_ms);
  setCard("ttft", sig(s.ttft_ms) + " ms", s.ttft_ms);
  setCard("toks", sig(s.decode_tok_s), s.decode_tok_s);
  setCard("seqtoks", sig(s.per_sequence_tok_s), s.per_sequence_tok_s);
  setCard("weights-mem", sig(s.weights_gib, 3) + " GiB", s.weights_gib);
  setCard("kvcap", sig(s.kv_capacity_tokens) + " tokens", s.kv_capacity_tokens);
  setCard("bound", s.decode_bound);
  $("tpot").dataset.batch = String(p.batch);
  $("fit").textContent = s.memory_fits
    ? `fits: ${p.batch} sequences of ${p.prompt + p.output} tokens (max ${sig(s.max_concurrent_seqs)} concurrent)`
    : `does not fit: short by ${sig(s.memory_shortfall_gib, 3)} GiB per GPU (times assume it fits)`;
  drawRoofline($("roofline"), v.roofline);
  drawBreakdown($("breakdown"), v.ops);
}

function el(name, attrs, parent, text) {
  const e = document.createElementNS(SVGNS, name);
  for (const [k, val] of Object.entries(attrs || {})) e.setAttribute(k, val);
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}

// A plot frame with log or linear axes. Returns {x, y} mapping functions.
function frame(svg, box, xr, yr, xlog, ylog, xlabel, ylabel) {
  svg.innerHTML = "";
  const W = Number(svg.getAttribute("width")), H = Number(svg.getAttribute("height"));
  const L = 70, R = box.right || 20, T = 14, B = 44;
  const tx = (v) => xlog ? Math.log10(v) : v, ty = (v) => ylog ? Math.log10(v) : v;
  const [x0, x1] = xr.map(tx), [y0, y1] = yr.map(ty);
  const x = (v) => L + (tx(v) - x0) / (x1 - x0) * (W - L - R);
  const y = (v) => H - B - (ty(v) - y0) / (y1 - y0) * (H - T - B);
  const ticks = (lo, hi, log) => {
    const out = [];
    if (log) { for (let e = Math.ceil(lo); e <= Math.floor(hi); e++) out.push(Math.pow(10, e)); }
    else {
      const step = Math.pow(10, Math.floor(Math.log10((hi - lo) / 4 || 1)));
      const k = (hi - lo) / step > 10 ? 2 * step : step;
      for (let t = Math.ceil(lo / k) * k; t <= hi + 1e-9; t += k) out.push(t);
    }
    return out;
  };
  for (const t of ticks(x0, x1, xlog)) {
    el("line", {x1: x(t), x2: x(t), y1: T, y2: H - B, stroke: "#eee"}, svg);
    el("text", {x: x(t), y: H - B + 16, "text-anchor": "middle", "font-size": 11}, svg, xlog ? human(t) : sig(t, 3));
  }
  for (const t of ticks(y0, y1, ylog)) {
    el("line", {x1: L, x2: W - R, y1: y(t), y2: y(t), stroke: "#eee"}, svg);
    el("text", {x: L - 6, y: y(t) + 4, "text-anchor": "end", "font-size": 11}, svg, ylog ? human(t) : sig(t, 3));
  }
  el("rect", {x: L, y: T, width: W - L - R, height: H - T - B, fill: "none", stroke: "#999"}, svg);
  el("text", {x: (L + W - R) / 2, y: H - 8, "text-anchor": "middle", "font-size": 12}, svg, xlabel);
  el("text", {x: 14, y: (T + H - B) / 2, "text-anchor": "middle", "font-size": 12,
    transform: `rotate(-90 14 ${(T + H - B) / 2})`}, svg, ylabel);
  return {x, y, clip: {L, R: W - R, T, B: H - B}};
}

function drawRoofline(svg, d) {
  const bw = d.bandwidth_bytes_per_s;
  const xs = d.points.map((p) => p.intensity_flop_per_byte).concat(d.roofs.map((r) => r.ridge_point_flop_per_byte));
  const xlo = Math.pow(10, Math.floor(Math.log10(Math.max(Math.min(...xs), 1e-3) / 2)));
  const xhi = Math.pow(10, Math.ceil(Math.log10(Math.max(...xs) * 3)));
  const top = Math.max(...d.roofs.map((r) => r.peak_flops_per_s));
  const ylo = Math.max(Math.min(...d.points.map((p) => p.attainable_flops_per_s), xlo * bw) / 3, 1e9);
  const f = frame(svg, {right: 190}, [xlo, xhi], [ylo, top * 3], true, true,
    "arithmetic intensity (FLOP/byte)", "attainable FLOP/s");
  const xb = Math.max(xlo, ylo / bw);
  el("line", {x1: f.x(xb), y1: f.y(xb * bw), x2: f.x(top / bw), y2: f.y(top), stroke: "#777",
    "stroke-dasharray": "2 3", class: "bandwidth"}, svg);
  const legend = [];
  for (const r of d.roofs) {
    const xr = r.peak_flops_per_s / bw;
    legend.push([`${r.dtype} roof ${human(r.peak_flops_per_s)}FLOP/s`, ROOF_DASH[r.dtype] || ""]);
    el("line", {x1: f.x(xr), y1: f.y(r.peak_flops_per_s), x2: f.x(xhi), y2: f.y(r.peak_flops_per_s),
      stroke: "#333", "stroke-width": 1.5, "stroke-dasharray": ROOF_DASH[r.dtype] || "", class: "roof",
      "data-dtype": r.dtype}, svg);
  }
  const rx = d.ridge_point_flop_per_byte, ry = rx * bw;
  el("line", {x1: f.x(rx), x2: f.x(rx), y1: f.clip.T, y2: f.clip.B, stroke: "#aaa", "stroke-dasharray": "4 3"}, svg);
  el("path", {d: `M${f.x(rx)},${f.y(ry) - 6} l6,6 l-6,6 l-6,-6 z`, fill: "#000", id: "ridge"}, svg);
  el("text", {x: f.x(rx) + 8, y: f.y(ry) + 22, "font-size": 11}, svg,
    `ridge point ${Math.round(rx)} FLOP/byte (${d.compute_dtype})`);
  const names = d.op_order;
  for (const p of d.points) {
    const c = OP_COLORS[names.indexOf(p.op) % OP_COLORS.length];
    const px = f.x(p.intensity_flop_per_byte), py = f.y(p.attainable_flops_per_s);
    const g = el("g", {class: "op", "data-phase": p.phase, "data-op": p.op}, svg);
    if (p.phase === "prefill") el("circle", {cx: px, cy: py, r: 6, fill: c, "fill-opacity": 0.85}, g);
    else el("path", {d: `M${px},${py - 7} l6,11 l-12,0 z`, fill: "none", stroke: c, "stroke-width": 2}, g);
    el("title", {}, g, `${p.phase} ${p.op}: ${sig(p.intensity_flop_per_byte, 3)} FLOP/byte, ` +
      `${human(p.attainable_flops_per_s)}FLOP/s attainable, ${sig(p.time_s * 1e3, 3)} ms, ${p.bound}-bound`);
  }
  let ly = 22;
  const lx = f.clip.R + 12;
  for (const [text, dash] of legend) {
    el("line", {x1: lx - 2, x2: lx + 12, y1: ly - 4, y2: ly - 4, stroke: "#333", "stroke-width": 1.5, "stroke-dasharray": dash}, svg);
    el("text", {x: lx + 17, y: ly, "font-size": 11}, svg, text);
    ly += 17;
  }
  for (const n of [...new Set(d.points.map((p) => p.op))]) {
    el("rect", {x: lx, y: ly - 9, width: 10, height: 10, fill: OP_COLORS[names.indexOf(n) % OP_COLORS.length]}, svg);
    el("text", {x: lx + 15, y: ly, "font-size": 11}, svg, n);
    ly += 17;
  }
}

function drawBreakdown(div, ops) {
  div.innerHTML = "";
  const names = [...new Set(Object.values(ops).flat().map((r) => r.op))];
  for (const phase of ["prefill", "decode"]) {
    const rows = ops[phase] || [];
    const total = rows.reduce((a, r) => a + r.time_s, 0);
    const label = document.createElement("div");
    label.className = "barlabel";
    label.textContent = `${phase}: ${sig(total * 1e3)} ms per step`;
    div.appendChild(label);
    const bar = document.createElement("div");
    bar.className = "bar";
    bar.dataset.phase = phase;
    for (const r of rows) {
      const seg = document.createElement("div");
      const share = total > 0 ? 100 * r.time_s / total : 0;
      seg.className = "seg";
      seg.style.width = share + "%";
      seg.style.background = OP_COLORS[names.indexOf(r.op) % OP_COLORS.length];
      seg.title = `${r.op}: ${sig(r.time_s * 1e3, 3)} ms (${sig(share, 3)}%), ${r.bound}-bound`;
      if (share >= 7) seg.textContent = `${r.op} ${Math.round(share)}%`;
      bar.appendChild(seg);
    }
    div.appendChild(bar);
  }
  const legend = document.createElement("div");
  legend.className = "legend";
  names.forEach((n, i) => {
    const s = document.createElement("span");
    const sw = document.createElement("i");
    sw.style.background = OP_COLORS[i % OP_COLORS.length];
    s.appendChild(sw);
    s.appendChild(document.createTextNode(n));
    legend.appendChild(s);
  });
  div.appendChild(legend);
}

function drawLoad(svg, pts, key, label, knee) {
  const r = pts.map((p) => p.rate_req_s);
  const vals = pts.flatMap((p) => [p[`${key}_p99_ci`][1], p[`${key}_p99_ms`], p[`${key}_p50_ms`]]).filter((v) => v !== null);
  const ymax = Math.max(...vals, 1e-3) * 1.1;
  const f = frame(svg, {}, [0, Math.max(...r) * 1.05], [0, ymax], false, false, "offered rate (req/s)", label);
  for (const [q, dash] of [["p50", ""], ["p99", "6 4"]]) {
    const band = pts.filter((p) => p[`${key}_${q}_ci`][0] !== null);
    if (band.length > 1) {
      const up = band.map((p) => `${f.x(p.rate_req_s)},${f.y(p[`${key}_${q}_ci`][1])}`);
      const down = band.slice().reverse().map((p) => `${f.x(p.rate_req_s)},${f.y(p[`${key}_${q}_ci`][0])}`);
      el("polygon", {points: up.concat(down).join(" "), fill: "#1f77b4", "fill-opacity": 0.15}, svg);
    }
    const line = pts.filter((p) => p[`${key}_${q}_ms`] !== null).map((p) => `${f.x(p.rate_req_s)},${f.y(p[`${key}_${q}_ms`])}`);
    el("polyline", {points: line.join(" "), fill: "none", stroke: "#1f77b4", "stroke-width": 2,
      "stroke-dasharray": dash, class: `${key}-${q}`}, svg);
    el("text", {x: f.clip.L + 8, y: f.clip.T + (q === "p50" ? 16 : 32), "font-size": 11}, svg,
      q === "p50" ? "P50 (solid)" : "P99 (dashed)");
  }
  if (knee !== null && knee !== undefined) {
    el("line", {x1: f.x(knee), x2: f.x(knee), y1: f.clip.T, y2: f.clip.B, stroke: "#d62728",
      "stroke-dasharray": "5 3", class: "knee"}, svg);
    el("text", {x: f.x(knee) - 4, y: f.clip.T + 14, "text-anchor": "end", "font-size": 11, fill: "#d62728"}, svg, `knee ${knee} req/s`);
  }
}

async function runSimulation() {
  const rates = $("sim-rates").value.split(",").map((x) => Number(x.trim())).filter((x) => x > 0);
  const body = Object.assign(params(), {rates, requests: Number($("sim-requests").value),
    prompt: $("sim-prompt").value, output: $("sim-output").value, engine: $("sim-engine").value});
  delete body.batch;  // an estimate field: /api/simulate refuses fields it does not take
  $("sim-status").textContent = "simulating…";
  $("sim-status").className = "muted";
  try {
    const res = await api("/api/simulate", body);
    drawLoad($("sim-ttft"), res.points, "ttft", "TTFT (ms)", res.knee_rate_req_s);
    drawLoad($("sim-tpot"), res.points, "tpot", "TPOT (ms)", res.knee_rate_req_s);
    const head = ["rate req/s", "TTFT P50", "TTFT P99", "TPOT P50", "TPOT P99", "req/s", "output tok/s"];
    const rows = res.points.map((p) => [p.rate_req_s, p.ttft_p50_ms, p.ttft_p99_ms, p.tpot_p50_ms,
      p.tpot_p99_ms, p.throughput_req_s, p.output_tok_s].map((v) => sig(v, 3)));
    $("sim-table").innerHTML = "<table><tr>" + head.map((h) => `<th>${h}</th>`).join("") + "</tr>" +
      rows.map((r) => "<tr>" + r.map((c) => `<td>${c}</td>`).join("") + "</tr>").join("") + "</table>";
    $("sim-status").textContent = `${res.requests} requests per rate; knee: ${res.knee_rate_req_s ?? "not found"} req/s`;
  } catch (e) {
    $("sim-status").textContent = e.message;
    $("sim-status").className = "error";
  }
}

function showTab(name) {
  for (const b of document.querySelectorAll(".tab")) b.classList.toggle("active", b.dataset.tab === name);
  $("panel-model").classList.toggle("hidden", name !== "model");
  $("panel-sim").classList.toggle("hidden", name !== "sim");
}

async function init() {
  const cat = await api("/api/catalog");
  const d = cat.defaults;
  fillSelect($("model"), cat.models.map((m) => m.name), d.model,
    cat.models.map((m) => `${m.name} (${sig(m.total_params / 1e9, 3)} B)`));
  fillSelect($("hardware"), cat.hardware.map((h) => h.name), d.hardware,
    cat.hardware.map((h) => h.display_name || h.name));
  fillSelect($("weights"), cat.dtypes.weights, d.weights);
  fillSelect($("kv"), cat.dtypes.kv, d.kv);
  fillSelect($("activations"), cat.dtypes.activations, d.activations);
  for (const id of ["model", "hardware", "weights", "kv", "activations", "tp", "pp", "ep", "output"]) {
    $(id).addEventListener("change", () => { if (id === "model") clearConfig(); scheduleUpdate(); });
  }
  for (const id of ["batch", "prompt"]) $(id).addEventListener("input", scheduleUpdate);
  $("config-file").addEventListener("change", async (ev) => {
    const file = ev.target.files[0];
    if (!file) return;
    try {
      state.config = JSON.parse(await file.text());
      state.configName = file.name.replace(/\.json$/, "");
      $("config-note").textContent = `using uploaded ${file.name}`;
      scheduleUpdate();
    } catch (e) { setStatus(`config.json: ${e.message}`, true); }
  });
  for (const b of document.querySelectorAll(".tab")) b.addEventListener("click", () => showTab(b.dataset.tab));
  $("sim-run").addEventListener("click", runSimulation);
  scheduleUpdate();
}

function clearConfig() {
  state.config = null;
  state.configName = null;
  $("config-note").textContent = "";
  $("config-file").value = "";
}

init().catch((e) => setStatus(e.message, true));
