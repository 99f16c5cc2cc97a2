// Renders the embedded profile. Every string from the profiled program reaches the page through
// textContent or attribute values set by the DOM API: never innerHTML, never eval.
"use strict";
const P = JSON.parse(document.getElementById("profile").textContent);
const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "style") e.style.cssText = v; else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}
function bytes(n) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return i === 0 ? `${n} B` : `${n.toFixed(1)} ${u[i]}`;
}
function secs(s) { return s < 1 ? `${(s * 1000).toFixed(0)} ms` : `${s.toFixed(2)} s`; }
function pct(a, b) { return b > 0 ? `${(100 * a / b).toFixed(0)}%` : "-"; }
const short = (f) => f.split("/").pop();
const cpu = (m) => m.cpu_python_s + m.cpu_native_s + (m.kernel_s || 0) + m.waiting_s;

// A sortable table: columns are [title, value(row), text(row), alignLeft].
function table(target, columns, rows, sortBy) {
  const t = $(target); t.replaceChildren();
  if (!rows.length) { t.append(el("tr", {}, el("td", { class: "name" }, "none"))); return; }
  let key = sortBy, desc = true;
  const head = el("tr");
  columns.forEach((c, i) => {
    const th = el("th", { class: c[3] ? "name" : "" }, c[0]);
    th.addEventListener("click", () => { desc = key === i ? !desc : true; key = i; draw(); });
    head.append(th);
  });
  const body = el("tbody");
  t.append(el("thead", {}, head), body);
  function draw() {
    const sorted = rows.slice().sort((a, b) => {
      const x = columns[key][1](a), y = columns[key][1](b);
      return (x < y ? -1 : x > y ? 1 : 0) * (desc ? -1 : 1);
    });
    body.replaceChildren(...sorted.map((r) =>
      el("tr", {}, ...columns.map((c) => el("td", { class: c[3] ? "name" : "" }, c[2](r))))));
  }
  draw();
}

// `add(tag, attrs, text)`: append an SVG element to `svg` (text only through textContent).
function svgAdder(svg) {
  const ns = "http://www.w3.org/2000/svg";
  return (tag, attrs, text) => {
    const e = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    svg.append(e); return e;
  };
}

function timeline() {
  const svg = $("timeline"), pts = P.memory.timeline;
  if (!pts.length) return;
  const W = svg.clientWidth || 1000, H = 180, L = 64, B = 20;
  const tMax = Math.max(P.wall_s, pts[pts.length - 1].t_s) || 1;
  const yMax = Math.max(1, ...pts.map((p) => Math.max(p.heap_bytes, p.rss_bytes)));
  const x = (t) => L + (W - L - 8) * t / tMax, y = (v) => H - B - (H - B - 8) * v / yMax;
  const add = svgAdder(svg);
  for (const [field, color] of [["rss_bytes", "var(--sys)"], ["heap_bytes", "var(--mem)"]]) {
    const d = pts.map((p, i) => `${i ? "L" : "M"}${x(p.t_s).toFixed(1)},${y(p[field]).toFixed(1)}`).join("");
    add("path", { d, fill: "none", stroke: color, "stroke-width": 2 });
  }
  add("text", { x: 4, y: 14 }, bytes(yMax));
  add("text", { x: 4, y: H - B }, "0");
  add("text", { x: W - 60, y: H - 4 }, secs(tMax));
  add("text", { x: x(P.memory.peak_at_s) - 4, y: y(P.memory.peak_heap_bytes) - 4 }, "▲");
}

// GPU memory of the tree (left scale) and utilisation in percent (right scale), when polled.
function gpuTimeline() {
  const pts = P.gpu.timeline || [];
  if (!P.gpu.available) return;
  for (const n of P.gpu.notes || []) $("gpu-notes").append(el("div", { class: "warn" }, n));
  $("gpu-part").hidden = false;
  if (!pts.length) return;
  const svg = $("gpu-timeline");
  const W = svg.clientWidth || 1000, H = 180, L = 64, B = 20;
  const tMax = Math.max(P.wall_s, pts[pts.length - 1].t_s) || 1;
  const mMax = Math.max(1, ...pts.map((p) => p.memory_bytes));
  const x = (t) => L + (W - L - 40) * t / tMax;
  const y = (v, max) => H - B - (H - B - 8) * v / max;
  const add = svgAdder(svg);
  for (const [value, max, color] of [[(p) => p.device_util_pct || 0, 100, "var(--sys)"],
    [(p) => p.util_pct, 100, "var(--py)"], [(p) => p.memory_bytes, mMax, "var(--nat)"]]) {
    const d = pts.map((p, i) => `${i ? "L" : "M"}${x(p.t_s).toFixed(1)},${y(value(p), max).toFixed(1)}`).join("");
    add("path", { d, fill: "none", stroke: color, "stroke-width": 2 });
  }
  add("text", { x: 4, y: 14 }, bytes(mMax));
  add("text", { x: W - 36, y: 14 }, "100%");
  add("text", { x: 4, y: H - B }, "0");
  add("text", { x: W - 100, y: H - 4 }, secs(tMax));
}

// Each process's kernels by CUPTI's account: its GPU time, its top kernels, and why GPU time
// is missing or partial.
function gpuKernels() {
  const box = $("gpu-kernels");
  for (const p of P.processes) {
    const k = p.gpu_calls && p.gpu_calls.kernels;
    if (!k) continue;
    $("gpu-kernels-part").hidden = false;
    const head = k.state === "on" || k.kernels > 0
      ? `pid ${p.pid}: GPU time ${secs(k.gpu_kernel_s)} in ${k.kernels} kernels` +
        (k.unattributed_s > 0 ? `, ${secs(k.unattributed_s)} of it in kernels no sampled launch ran` : "")
      : `pid ${p.pid}: no GPU time`;
    box.append(el("p", {}, head, k.note ? ` (${k.note})` : ""));
    if (!k.top.length) continue;
    const t = el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "GPU time"), el("th", {}, "kernels"), el("th", {}, "device"), el("th", { class: "src" }, "kernel"))));
    const body = el("tbody");
    for (const s of k.top) {
      body.append(el("tr", {}, el("td", {}, secs(s.gpu_s)), el("td", {}, String(s.kernels)),
        el("td", {}, s.device === undefined ? "" : String(s.device)), el("td", { class: "src" }, s.name)));
    }
    t.append(body);
    box.append(t);
  }
}

// Each process's PyTorch tensors at its allocator's peak, per device: the lines holding them,
// the cache slack, and the lines holding memory when an allocation failed.
function gpuTensors() {
  const box = $("gpu-tensors");
  const table = (lines) => {
    const t = el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "tensors"), el("th", {}, "blocks"), el("th", { class: "src" }, "allocated at"))));
    const body = el("tbody");
    for (const l of lines) {
      body.append(el("tr", {}, el("td", {}, bytes(l.bytes)), el("td", {}, String(l.blocks)),
        el("td", { class: "src" }, `${l.file}:${l.line} (${l.function})`)));
    }
    t.append(body);
    return t;
  };
  for (const p of P.processes) {
    const t = p.gpu_tensors;
    if (!t) continue;
    $("gpu-tensors-part").hidden = false;
    if (t.note) box.append(el("div", { class: "warn" }, `pid ${p.pid}: ${t.note}`));
    for (const d of t.devices) {
      const at = d.at_s === undefined ? "" : ` at ${secs(d.at_s)}`;
      box.append(el("p", {}, `pid ${p.pid}, device ${d.device}: ${bytes(d.peak_allocated_bytes)} of tensors at the peak${at} ` +
        `(${bytes(d.reserved_at_peak_bytes)} reserved, ${bytes(d.cache_slack_bytes)} cache slack` +
        (d.before_trace_bytes ? `, ${bytes(d.before_trace_bytes)} allocated before the ${t.cut_to_region ? "region" : "trace"} began` : "") + ")"));
      if (d.top.length) box.append(table(d.top));
      if (d.growing && d.growing.length) {
        box.append(el("p", {}, "Rising step after step until the peak:"), table(d.growing));
      }
      if (d.oom) {
        const o = d.oom, where = o.at ? ` at ${o.at.file}:${o.at.line}` : "";
        box.append(el("p", { class: "warn" }, `Out of memory${where}${o.at_s === undefined ? "" : ` (${secs(o.at_s)})`}: ` +
          `asked ${bytes(o.requested_bytes)} with ${bytes(o.device_free_bytes)} free and ${bytes(o.allocated_bytes)} of tensors held by:`));
        if (o.top.length) box.append(table(o.top));
      }
    }
  }
}

// Device memory held through CUDA calls (exact, from the calls): one step line per process and
// device, its peak marked; dashed after the last call (held from then on, while the process
// lived).
function gpuHeld() {
  const series = [];
  for (const p of P.processes) {
    for (const d of (p.gpu_calls && p.gpu_calls.devices) || []) {
      if (d.timeline && d.timeline.length) series.push({ pid: p.pid, d });
    }
  }
  if (!series.length) return;
  $("gpu-calls-part").hidden = false;
  const svg = $("gpu-calls-timeline");
  const W = svg.clientWidth || 1000, H = 180, L = 64, B = 20;
  const tMax = Math.max(P.wall_s, ...series.map((s) => s.d.timeline[s.d.timeline.length - 1].t_s)) || 1;
  const yMax = Math.max(1, ...series.map((s) => s.d.peak_bytes));
  const x = (t) => L + (W - L - 8) * t / tMax, y = (v) => H - B - (H - B - 8) * v / yMax;
  const add = svgAdder(svg);
  const colors = ["var(--nat)", "var(--py)", "var(--mem)", "var(--sys)", "var(--leak)"];
  series.forEach((s, i) => {
    const color = colors[i % colors.length], pts = s.d.timeline;
    let d = `M${x(pts[0].t_s).toFixed(1)},${y(0).toFixed(1)}`;
    for (const p of pts) d += `H${x(p.t_s).toFixed(1)}V${y(p.bytes).toFixed(1)}`;
    add("path", { d, fill: "none", stroke: color, "stroke-width": 2 });
    const end = pts[pts.length - 1];
    add("path", { d: `M${x(end.t_s).toFixed(1)},${y(end.bytes).toFixed(1)}H${x(tMax).toFixed(1)}`,
      fill: "none", stroke: color, "stroke-width": 1, "stroke-dasharray": "4 3" });
    const mark = add("text", { x: x(s.d.at_s) - 4, y: y(s.d.peak_bytes) - 4, fill: color }, "▲");
    svgAdder(mark)("title", {}, `peak ${bytes(s.d.peak_bytes)} at ${secs(s.d.at_s)}`);
    // The peak of the process's tensors on this device (its allocator's trace), when timed.
    const proc = P.processes.find((p) => p.pid === s.pid);
    const td = proc && proc.gpu_tensors && proc.gpu_tensors.devices.find((t) => t.device === s.d.device);
    if (td && td.at_s !== undefined) {
      const tm = add("text", { x: x(td.at_s) - 4, y: y(td.peak_allocated_bytes) + 12, fill: color }, "▼");
      svgAdder(tm)("title", {}, `tensors' peak ${bytes(td.peak_allocated_bytes)} at ${secs(td.at_s)}`);
    }
    const device = s.d.device === null || s.d.device === undefined ? "device ?" : `device ${s.d.device}`;
    $("gpu-calls-legend").append(el("span", {}, el("i", { class: "sw", style: `background:${color}` }),
      `pid ${s.pid} ${device}: peak ${bytes(s.d.peak_bytes)} at ${secs(s.d.at_s)}, ${bytes(s.d.end_bytes)} at the end`));
  });
  add("text", { x: 4, y: 14 }, bytes(yMax));
  add("text", { x: 4, y: H - B }, "0");
  add("text", { x: W - 60, y: H - 4 }, secs(tMax));
}

const gpuLines = P.gpu.available && P.lines.some((l) => l.gpu_util_pct > 0 || l.gpu_memory_bytes > 0);
// How each line's time spreads across ranks: a column only for a job of several ranks.
const rankLines = P.lines.some((l) => l.ranks);
// Of the held bytes, anonymous mappings outside malloc: a column only when some line has them.
const mappedLines = P.lines.some((l) => (l.mapped_peak_bytes || 0) > 0);
// What CUDA calls did per line (absent fields are 0): columns only when some line made calls.
const gpuCopied = (l) => (l.gpu_h2d_bytes || 0) + (l.gpu_d2h_bytes || 0) + (l.gpu_d2d_bytes || 0);
const callLines = P.lines.some((l) => (l.gpu_reserved_bytes || 0) > 0 || gpuCopied(l) > 0 || (l.gpu_wait_s || 0) > 0 || (l.gpu_launches || 0) > 0);
// The device time of the kernels each line launched (CUPTI): a column only when some line has it.
const kernelLines = P.lines.some((l) => (l.gpu_kernel_s || 0) > 0);
// Tensors each line held at its process's GPU peak (PyTorch's allocator trace): a column only
// when some line has them.
const tensorLines = P.lines.some((l) => (l.gpu_tensor_peak_bytes || 0) > 0);
const kernelNames = (l) => (l.gpu_kernel_names || []).map((k) => `${k.name}: ${secs(k.gpu_s)} in ${k.kernels} kernels`).join("\n");

function lines() {
  const box = $("lines");
  const whole = P.lines.reduce((s, l) => s + cpu(l), 0) || 1;
  const heldMax = Math.max(1, ...P.lines.map((l) => l.peak_bytes));
  const byFile = new Map();
  for (const l of P.lines) {
    const calls = (l.gpu_reserved_bytes || 0) + gpuCopied(l) + (l.gpu_launches || 0) + (l.gpu_pinned_bytes || 0) + (l.gpu_kernel_s || 0) + (l.gpu_tensor_peak_bytes || 0) > 0;
    if (cpu(l) < 0.002 * whole && l.alloc_bytes === 0 && l.copy_bytes === 0 && !(l.mapped_peak_bytes > 0) && !calls) continue;
    if (!byFile.has(l.file)) byFile.set(l.file, []);
    byFile.get(l.file).push(l);
  }
  const scale = 160;
  // Sort keys of the columns (null: not sortable); rows keep their native-function rows.
  const keys = [(l) => l.line, cpu, (l) => l.cpu_python_s + l.cpu_native_s, (l) => l.alloc_bytes,
    (l) => l.alloc_python_bytes / Math.max(1, l.alloc_bytes), (l) => l.peak_bytes,
    ...(mappedLines ? [(l) => l.mapped_peak_bytes || 0] : []), (l) => l.copy_bytes,
    ...(rankLines ? [(l) => (l.ranks ? l.ranks.max_s - l.ranks.median_s : 0)] : []),
    (l) => (l.leak ? l.leak.likelihood : 0), ...(gpuLines ? [(l) => l.gpu_util_pct, (l) => l.gpu_memory_bytes] : []),
    ...(kernelLines ? [(l) => l.gpu_kernel_s || 0] : []),
    ...(tensorLines ? [(l) => l.gpu_tensor_peak_bytes || 0] : []),
    ...(callLines ? [(l) => l.gpu_peak_bytes || 0, (l) => l.gpu_reserved_bytes || 0, gpuCopied, (l) => l.gpu_wait_s || 0, (l) => l.gpu_launches || 0] : []), null];
  const titles = ["line", "time", "Python / native / kernel / waiting", "allocated", "Python", "held at peak",
    ...(mappedLines ? ["mapped at its peak"] : []), "copied",
    ...(rankLines ? ["ranks: median / slowest"] : []), "",
    ...(gpuLines ? ["GPU busy while it ran", "GPU memory growth"] : []),
    ...(kernelLines ? ["GPU time"] : []),
    ...(tensorLines ? ["GPU tensors at the peak"] : []),
    ...(callLines ? ["GPU held at its peak", "GPU reserved", "GPU copied", "GPU wait", "kernel launches"] : []), "source"];
  for (const [file, ls] of byFile) {
    box.append(el("div", { class: "file" }, file));
    const t = el("table"), body = el("tbody");
    const groups = ls.map((l) => [l, lineRows(l, whole, heldMax, scale)]);
    let key = 0, desc = false;
    const draw = () => {
      groups.sort((a, b) => (keys[key](a[0]) - keys[key](b[0])) * (desc ? -1 : 1));
      body.replaceChildren(...groups.flatMap((g) => g[1]));
    };
    const head = el("tr");
    titles.forEach((h, i) => {
      const th = el("th", { class: i === titles.length - 1 ? "src" : "" }, h);
      if (keys[i]) th.addEventListener("click", () => { desc = key === i ? !desc : i !== 0; key = i; draw(); });
      head.append(th);
    });
    t.append(el("thead", {}, head), body);
    draw();
    box.append(t);
  }
}

// The row of a line, then the rows of its top native functions.
function lineRows(l, whole, heldMax, scale) {
  const bar = (v, color) => el("span", { class: "bar", style: `width:${Math.round(scale * v / whole)}px;background:${color}` });
  const held = el("span", { class: "bar", style: `width:${Math.round(80 * l.peak_bytes / heldMax)}px;background:var(--mem)` });
  const leak = l.leak ? el("span", { title: `likelihood ${(100 * l.leak.likelihood).toFixed(0)}%`, style: "color:var(--leak)" }, "leak") : "";
  const rows = [el("tr", {},
    el("td", {}, l.line), el("td", {}, secs(cpu(l))),
    el("td", { class: "name" }, bar(l.cpu_python_s, "var(--py)"), bar(l.cpu_native_s, "var(--nat)"), bar(l.kernel_s || 0, "var(--ker)"), bar(l.waiting_s, "var(--sys)")),
    el("td", {}, bytes(l.alloc_bytes)), el("td", {}, pct(l.alloc_python_bytes, l.alloc_bytes)),
    el("td", {}, held, " ", bytes(l.peak_bytes)),
    ...(mappedLines ? [el("td", {}, bytes(l.mapped_peak_bytes || 0))] : []),
    el("td", l.copy_loop_s > 0.005 * whole ? { title: `also ${secs(l.copy_loop_s)} copying element by element in numpy's strided and cast loops (bytes not counted)` } : {},
      bytes(l.copy_bytes), l.copy_loop_s > 0.005 * whole ? " +" : ""),
    ...(rankLines ? [el("td", {}, l.ranks ? `${secs(l.ranks.median_s)} / ${secs(l.ranks.max_s)} (rank ${l.ranks.max_rank})` : "")] : []),
    el("td", {}, leak),
    ...(gpuLines ? [el("td", {}, `${l.gpu_util_pct.toFixed(0)}%`), el("td", {}, bytes(l.gpu_memory_bytes))] : []),
    ...(kernelLines ? [el("td", { title: kernelNames(l) }, secs(l.gpu_kernel_s || 0))] : []),
    ...(tensorLines ? [el("td", {}, bytes(l.gpu_tensor_peak_bytes || 0))] : []),
    ...(callLines ? [el("td", {}, bytes(l.gpu_peak_bytes || 0)), el("td", {}, bytes(l.gpu_reserved_bytes || 0)),
      el("td", { title: `host→device ${bytes(l.gpu_h2d_bytes || 0)}, device→host ${bytes(l.gpu_d2h_bytes || 0)}, device→device ${bytes(l.gpu_d2d_bytes || 0)}` }, bytes(gpuCopied(l))),
      el("td", {}, secs(l.gpu_wait_s || 0)), el("td", {}, String(l.gpu_launches || 0))] : []),
    el("td", { class: "src" }, l.source || l.function))];
  for (const n of l.native.slice(0, 3)) {
    if (n.cpu_s < 0.005 * whole) continue;
    rows.push(el("tr", { class: "natives" }, el("td"), el("td", {}, pct(n.cpu_s, whole)),
      el("td", { class: "name", colspan: 7 + (gpuLines ? 2 : 0) + (kernelLines ? 1 : 0) + (tensorLines ? 1 : 0) + (callLines ? 5 : 0) + (mappedLines ? 1 : 0) + (rankLines ? 1 : 0) }, `${n.symbol} (${n.library})`)));
  }
  return rows;
}

// An icicle flame graph of `value(stack)` over the profile's stacks (outermost frame on top).
function flame(id, value, format) {
  const svg = $(id), ns = "http://www.w3.org/2000/svg";
  const root = { children: new Map(), value: 0, frame: -1 };
  for (const s of P.stacks) {
    const v = value(s);
    if (v <= 0) continue;
    root.value += v;
    let node = root;
    for (const f of s.frames.slice(0, 40)) {
      // Flame graphs merge a function's frames whatever line they were on.
      const fr = P.stack_frames[f], key = `${fr.function}\u0000${fr.file}`;
      if (!node.children.has(key)) node.children.set(key, { children: new Map(), value: 0, frame: f });
      node = node.children.get(key);
      node.value += v;
    }
  }
  if (root.value <= 0) { svg.setAttribute("height", 20); return; }
  const W = svg.clientWidth || 1000, H = 17;
  let depth = 0;
  const draw = (node, x, level) => {
    const w = W * node.value / root.value;
    if (w < 1) return;
    depth = Math.max(depth, level);
    if (node.frame >= 0) {
      const f = P.stack_frames[node.frame];
      const native = f.line === 0;
      const g = document.createElementNS(ns, "g");
      const r = document.createElementNS(ns, "rect");
      for (const [k, v] of Object.entries({ x, y: level * H, width: Math.max(w - 1, 1), height: H - 1,
        fill: native ? "#f0b86e" : `hsl(${210 + (node.frame * 37) % 40}, 55%, ${62 + (node.frame * 13) % 14}%)` })) r.setAttribute(k, v);
      const title = document.createElementNS(ns, "title");
      title.textContent = `${f.function} (${native ? f.file : short(f.file)}) ${format(node.value)} (${pct(node.value, root.value)})`;
      r.append(title);
      g.append(r);
      if (w > 40) {
        const t = document.createElementNS(ns, "text");
        t.setAttribute("x", x + 3); t.setAttribute("y", level * H + 12);
        t.textContent = f.function.slice(0, Math.floor(w / 7));
        g.append(t);
      }
      svg.append(g);
    }
    let cx = x;
    for (const child of [...node.children.values()].sort((a, b) => b.value - a.value)) {
      draw(child, cx, node.frame >= 0 ? level + 1 : level);
      cx += W * child.value / root.value;
    }
  };
  draw(root, 0, 0);
  svg.setAttribute("height", (depth + 1) * H + 4);
}

// The per-process view: the flame graphs, threads and a lines table of one chosen process
// (built from its stacks: the innermost Python frame of each stack is its line).
function processLines(pid) {
  const by = new Map();
  for (const s of P.stacks) {
    if (s.pid !== pid) continue;
    let leaf = null;
    for (const f of s.frames) if (P.stack_frames[f].line > 0) leaf = P.stack_frames[f];
    if (!leaf) continue;
    const key = `${leaf.file}\u0000${leaf.line}`;
    if (!by.has(key)) by.set(key, { file: leaf.file, line: leaf.line, function: leaf.function,
      cpu_python_s: 0, cpu_native_s: 0, kernel_s: 0, waiting_s: 0, alloc_bytes: 0, peak_bytes: 0 });
    const l = by.get(key);
    for (const k of ["cpu_python_s", "cpu_native_s", "kernel_s", "waiting_s", "alloc_bytes", "peak_bytes"]) l[k] += s[k] || 0;
  }
  return [...by.values()];
}

const threadColumns = [["pid", (t) => t.pid, (t) => t.pid], ["tid", (t) => t.tid, (t) => t.tid], ["kind", (t) => t.python, (t) => t.python ? "Python" : "native", true],
  ["Python", (t) => t.cpu_python_s, (t) => secs(t.cpu_python_s)], ["native", (t) => t.cpu_native_s, (t) => secs(t.cpu_native_s)],
  ["kernel", (t) => t.kernel_s || 0, (t) => secs(t.kernel_s || 0)], ["waiting", (t) => t.waiting_s, (t) => secs(t.waiting_s)]];

function showProcess(choice) {
  const pid = choice === "" ? null : Number(choice);
  const keep = (s) => pid === null || s.pid === pid;
  for (const id of ["flame-cpu", "flame-peak"]) $(id).replaceChildren();
  flame("flame-cpu", (s) => keep(s) ? s.cpu_python_s + s.cpu_native_s + (s.kernel_s || 0) : 0, secs);
  flame("flame-peak", (s) => keep(s) ? s.peak_bytes : 0, bytes);
  table("threads", threadColumns, P.threads.filter(keep), 3);
  $("process-lines-part").hidden = pid === null;
  if (pid === null) return;
  const proc = P.processes.find((p) => p.pid === pid);
  $("process-lines-title").textContent = `Lines of process ${pid}` + (proc ? ` (${proc.command.join(" ")})` : "");
  table("process-lines", [["time", cpu, (l) => secs(cpu(l))], ["Python", (l) => l.cpu_python_s, (l) => secs(l.cpu_python_s)],
    ["native", (l) => l.cpu_native_s, (l) => secs(l.cpu_native_s)], ["kernel", (l) => l.kernel_s || 0, (l) => secs(l.kernel_s || 0)],
    ["waiting", (l) => l.waiting_s, (l) => secs(l.waiting_s)],
    ["allocated", (l) => l.alloc_bytes, (l) => bytes(l.alloc_bytes)], ["held at peak", (l) => l.peak_bytes, (l) => bytes(l.peak_bytes)],
    ["line", (l) => l.file + l.line, (l) => `${short(l.file)}:${l.line} ${l.function}`, true]], processLines(pid), 0);
}

function processChooser() {
  // A profile of many ranks carries the job's flame graphs, not each process's.
  if (P.processes.length < 2 || (P.ranks && P.ranks.length > 8)) return;
  const sel = $("process-select");
  sel.append(el("option", { value: "" }, "all processes"));
  for (const p of P.processes) {
    const label = `${p.rank ? p.rank + ": " : ""}${p.pid} ${p.command.join(" ")}`.slice(0, 120);
    sel.append(el("option", { value: String(p.pid) }, label));
  }
  sel.addEventListener("change", () => showProcess(sel.value));
  $("process-part").hidden = false;
}

function ranks() {
  if (!P.ranks || !P.ranks.length) return;
  $("ranks-part").hidden = false;
  const box = $("stragglers");
  for (const s of P.stragglers || []) {
    box.append(el("li", {}, `${s.name} ${s.waiting ? "waits" : "spends"} ${secs(s.excess_s)} more than the other ranks' median (${secs(s.median_s)}) at ${short(s.file)}:${s.line} `,
      el("code", {}, s.source || s.function)));
  }
  for (const m of P.memory_imbalance || []) {
    box.append(el("li", {}, `${m.name} holds ${bytes(m.excess_bytes)} more at its heap peak than the other ranks' median (${bytes(m.median_bytes)}); ${bytes(m.line_excess_bytes)} of it at ${short(m.file)}:${m.line} `,
      el("code", {}, m.source || m.function)));
  }
  table("ranks", [["rank", (r) => -(r.rank ?? P.ranks.indexOf(r)), (r) => r.name, true],
    ["Python", (r) => r.cpu_python_s || 0, (r) => secs(r.cpu_python_s || 0)], ["native", (r) => r.cpu_native_s || 0, (r) => secs(r.cpu_native_s || 0)],
    ["waiting", (r) => r.waiting_s || 0, (r) => secs(r.waiting_s || 0)], ["collective", (r) => r.collective_s || 0, (r) => secs(r.collective_s || 0)],
    ["peak heap", (r) => r.peak_heap_bytes, (r) => bytes(r.peak_heap_bytes)],
    ["peak RSS", (r) => r.peak_rss_bytes, (r) => bytes(r.peak_rss_bytes)],
    ["GPU memory", (r) => r.peak_gpu_memory_bytes, (r) => bytes(r.peak_gpu_memory_bytes)],
    ["wall", (r) => r.wall_s, (r) => secs(r.wall_s)],
    ["processes", (r) => r.processes, (r) => r.processes],
    ["exit", (r) => r.exit.code ?? -1, (r) => r.exit.code !== null ? r.exit.code : r.exit.signal !== null ? `signal ${r.exit.signal}` : "?"],
    ["pids / source", (r) => r.source || (r.pids || []).join(" "), (r) => r.source || (r.pids || []).join(" "), true]], P.ranks, 0);
  const sel = $("rank-select");
  P.ranks.forEach((r, i) => sel.append(el("option", { value: String(i) }, r.name)));
  const showRank = () => {
    const r = P.ranks[Number(sel.value)];
    table("rank-lines", [["time", (l) => l.time_s, (l) => secs(l.time_s)], ["waiting", (l) => l.waiting_s, (l) => secs(l.waiting_s)],
      ["held at peak", (l) => l.peak_bytes, (l) => bytes(l.peak_bytes)],
      ["line", (l) => l.file + l.line, (l) => `${short(l.file)}:${l.line} ${l.function}`, true]], (r && r.lines) || [], 0);
  };
  sel.addEventListener("change", showRank);
  showRank();
}

timeline();
gpuTimeline();
gpuHeld();
gpuKernels();
gpuTensors();
ranks();
processChooser();
showProcess("");
lines();
table("peak", [["held at peak", (l) => l.peak_bytes, (l) => bytes(l.peak_bytes)], ["line", (l) => l.file + l.line, (l) => `${short(l.file)}:${l.line}`, true],
  ["source", (l) => l.source, (l) => l.source, true]], P.lines.filter((l) => l.peak_bytes > 0), 0);
table("leaks", [["growth/s", (l) => l.leak.bytes_per_s, (l) => bytes(Math.max(0, Math.round(l.leak.bytes_per_s)))],
  ["likelihood", (l) => l.leak.likelihood, (l) => `${(100 * l.leak.likelihood).toFixed(0)}%`],
  ["line", (l) => l.file + l.line, (l) => `${short(l.file)}:${l.line}`, true], ["source", (l) => l.source, (l) => l.source, true]],
  P.lines.filter((l) => l.leak), 0);
if (P.regions && P.regions.length) {
  $("regions-part").hidden = false;
  const top = (r) => r.held_at_peak.length ? `${short(r.held_at_peak[0].file)}:${r.held_at_peak[0].line} ${bytes(r.held_at_peak[0].bytes)}` : "";
  const signed = (n) => n < 0 ? `-${bytes(-n)}` : bytes(n);
  table("regions", [["peak", (r) => r.peak_bytes + r.children_peak_bytes, (r) => bytes(r.peak_bytes + r.children_peak_bytes)],
    ["net", (r) => r.end_bytes, (r) => signed(r.end_bytes)], ["time", (r) => r.duration_s, (r) => secs(r.duration_s)],
    ["Python", (r) => r.cpu_python_s, (r) => secs(r.cpu_python_s)], ["native", (r) => r.cpu_native_s, (r) => secs(r.cpu_native_s)],
    ["waiting", (r) => r.waiting_s, (r) => secs(r.waiting_s)],
    // The CUDA calls made inside each region (exact): columns only when some region made some.
    ...(P.regions.some((r) => (r.gpu_reserved_bytes || 0) > 0 || gpuCopied(r) > 0)
      ? [["GPU held at its peak", (r) => r.gpu_peak_bytes || 0, (r) => bytes(r.gpu_peak_bytes || 0)],
        ["GPU reserved", (r) => r.gpu_reserved_bytes || 0, (r) => bytes(r.gpu_reserved_bytes || 0)],
        ["GPU copied", gpuCopied, (r) => bytes(gpuCopied(r))]] : []),
    // Tensors by PyTorch's allocator trace (exact): a column only when some region has some.
    ...(P.regions.some((r) => (r.gpu_tensor_peak_bytes || 0) > 0)
      ? [["GPU tensors", (r) => r.gpu_tensor_peak_bytes || 0, (r) => bytes(r.gpu_tensor_peak_bytes || 0)]] : []),
    ["pid", (r) => r.pid, (r) => r.pid],
    ["region", (r) => r.name, (r) => r.name, true], ["held most at the peak", top, top, true]], P.regions, 0);
}
table("functions", [["time", cpu, (f) => secs(cpu(f))], ["Python", (f) => f.cpu_python_s, (f) => secs(f.cpu_python_s)],
  ["native", (f) => f.cpu_native_s, (f) => secs(f.cpu_native_s)], ["kernel", (f) => f.kernel_s || 0, (f) => secs(f.kernel_s || 0)],
  ["waiting", (f) => f.waiting_s, (f) => secs(f.waiting_s)],
  ["allocated", (f) => f.alloc_bytes, (f) => bytes(f.alloc_bytes)], ["held at peak", (f) => f.peak_bytes, (f) => bytes(f.peak_bytes)],
  ["function", (f) => f.function, (f) => `${f.function} (${short(f.file)}:${f.line})`, true]], P.functions, 0);
table("processes", [...(P.ranks && P.ranks.length ? [["rank", (p) => p.rank || "", (p) => p.rank || "-", true]] : []), ["pid", (p) => p.pid, (p) => p.pid], ["ppid", (p) => p.ppid, (p) => p.ppid], ["python", (p) => p.python || "", (p) => p.python || "-"],
  ["peak heap", (p) => p.peak_heap_bytes, (p) => bytes(p.peak_heap_bytes)], ["peak RSS", (p) => p.peak_rss_bytes, (p) => bytes(p.peak_rss_bytes)],
  ["CPU", (p) => p.cpu_s, (p) => secs(p.cpu_s)], ["exit", (p) => p.exit.code ?? -1, (p) => p.still_running ? "running" : p.exit.code !== null ? p.exit.code : p.exit.signal !== null ? `signal ${p.exit.signal}` : "?"],
  ["command", (p) => p.command.join(" "), (p) => p.command.join(" "), true]], P.processes, P.ranks && P.ranks.length ? 4 : 3);
