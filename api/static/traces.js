// Plotly traces of a result: styles, the time lines (batch plot), cost points, GPU lines, and their hover text.

import { sig3, duration, money, hourly, hexToRgba } from "./util.js";
import { providerName, gpuText, machineSpec, deviceMemoryGib } from "./state.js";

const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                 "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
export const SYMBOLS = ["circle", "square", "diamond", "triangle-up", "cross", "star"];
// Ten distinct colours, then evenly spaced hues when more are needed (sixty machine types).
export function colour(i, n) {
  if (n <= PALETTE.length) return PALETTE[i % PALETTE.length];
  const hue = (i * 360) / n;
  const lightness = i % 2 ? 0.36 : 0.48;
  const f = (k) => {
    const a = 0.7 * Math.min(lightness, 1 - lightness);
    const x = (k + hue / 30) % 12;
    return Math.round(255 * (lightness - a * Math.max(-1, Math.min(x - 3, 9 - x, 1))));
  };
  return "#" + [f(0), f(8), f(4)].map((v) => v.toString(16).padStart(2, "0")).join("");
}

// Colour by whichever of CNN and machine has more members; the other gets marker shapes. The line's dash and
// whether its markers are filled say where the numbers come from (SOURCES).
export function styles(cnns, machines) {
  const byCnn = cnns.length >= machines.length;
  const n = byCnn ? cnns.length : machines.length;
  return (cnn, machine) => {
    const ci = cnns.indexOf(cnn);
    const mi = machines.indexOf(machine);
    const [hue, shape] = byCnn ? [ci, mi] : [mi, ci];
    return { color: colour(hue, n), symbol: SYMBOLS[shape % SYMBOLS.length] };
  };
}

// Measured numbers are drawn solid with filled markers; reference ones dashed with open markers.
const SOURCES = {
  benchmarked: { dash: "solid", open: false },
  reference: { dash: "dash", open: true },
};

export function sourceStyle(source) {
  return SOURCES[source] || SOURCES.benchmarked;
}

export function markerSymbol(symbol, source) {
  return sourceStyle(source).open ? `${symbol}-open` : symbol;
}

// What a point's numbers rest on, for hover labels and the tables.
export function sourceText(p, machine, models) {
  if (p.source === "reference") {
    const band = bandText(p);
    let text = band ? `reference (P10–P90 ${band})` : "reference";
    if (p.launch_bound) text += ", launch-bound";
    return text;
  }
  if (p.source === "benchmarked") {
    const model = models[machine] || {};
    const others = (p.measured_on || (model.measured_on ? [model.measured_on] : [])).filter((m) => m !== machine);
    return others.length ? `benchmarked (measured on ${others.join(", ")})` : "benchmarked";
  }
  return "";
}

// A point's P10–P90 as multiples of its answer, "×0.85–×1.21"; "" where it has none.
export function bandText(p) {
  const mid = p.iteration_seconds, lo = p.iteration_seconds_p10, hi = p.iteration_seconds_p90;
  if (!mid || typeof lo !== "number" || typeof hi !== "number") return "";
  return `×${(lo / mid).toFixed(2)}–×${(hi / mid).toFixed(2)}`;
}

// "8 GPUs × 4 machines": a point's data-parallel layout.
export function layoutOf(p) {
  const gpus = p.gpus_used || 1;
  const nodes = p.nodes || 1;
  return `${gpus} GPU${gpus === 1 ? "" : "s"}` + (nodes > 1 ? ` × ${nodes} machines` : "");
}

// Predictions by "cnn\u0000machine", each list sorted by batch size: one pass over tens of thousands of points.
export function byPair(predictions) {
  const groups = new Map();
  for (const p of predictions) {
    const key = `${p.cnn}\u0000${p.machine}`;
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(p);
  }
  for (const list of groups.values()) list.sort((a, b) => a.batch_size - b.batch_size);
  return groups;
}

// Data parallel: per CNN × machine × node count, its fastest training time against the GPUs it uses
// (GPUs per machine × machines), drawn only when a result compares GPU or node counts.
export function gpuTraces(cnns, machines, pairs, style, drawable, unit) {
  const traces = [];
  for (const cnn of cnns) {
    for (const machine of machines) {
      const points = (pairs.get(`${cnn}\u0000${machine}`) || []).filter(drawable);
      const fastest = new Map();  // total GPUs → its fastest point
      for (const p of points) {
        const gpus = (p.gpus_used || 1) * (p.nodes || 1);
        const seen = fastest.get(gpus);
        if (!seen || p.total_seconds < seen.total_seconds) fastest.set(gpus, p);
      }
      if (fastest.size < 2) continue;
      const chosen = [...fastest.entries()].sort((a, b) => a[0] - b[0]);
      const s = style(cnn, machine);
      traces.push({
        type: "scatter", mode: "lines+markers", name: `${cnn} · ${machine}`,
        x: chosen.map(([g]) => g), y: chosen.map(([, p]) => p.total_seconds / unit.seconds),
        line: { color: s.color, width: 2 }, marker: { color: s.color, symbol: s.symbol, size: 8 },
        meta: { cnn, machine, role: "gpus" },
        text: chosen.map(([, p]) => `${cnn} on ${machine}: ${layoutOf(p)} at batch ${p.batch_size} per GPU`
          + ` (global ${p.global_batch_size})<br>${sig3(p.total_seconds / unit.seconds)} ${unit.name}, `
          + `${money(p.cost_usd)}, scaling efficiency ${Math.round((p.scaling_efficiency ?? 1) * 100)}%${between(p)}`
          + (p.allreduce_algorithm ? `<br>all-reduce: ${p.allreduce_algorithm}` : "")),
        hovertemplate: "%{text}<extra></extra>",
      });
    }
  }
  return traces;
}

// Two machine types with equal predictions (the same GPU answered by the reference) would draw one line over the
// other: each later twin gets its own dash, smaller markers on the cost plot, and every twin names the others.
export const TWIN_DASHES = ["dot", "dashdot", "longdashdot", "longdash"];

// A cost point's label: what tells it apart from the others.
export function pointLabel(cnn, machine, cnns, machines) {
  if (cnns.length === 1) return machine;
  if (machines.length === 1) return cnn;
  return `${cnn} · ${machine}`;
}

// The machine type's provider, GPU and price, for hover labels.
function machineLine(machine) {
  const m = machineSpec(machine);
  if (!m) return machine;
  const price = m.price_usd_per_hour ? `${hourly(m.price_usd_per_hour)}/h` : "free";
  return `${machine} (${providerName(m)}, ${gpuText(m)}, ${price})`;
}

// Training on one GPU of a machine with several: say so and give the per-GPU share of the cost.
// The network the all-reduce was modelled over between machines (the job's internode_gbps or the catalog's).
function between(p) {
  return p.nodes > 1 && typeof p.internode_gbps === "number" ? ` (${p.internode_gbps} Gbit/s between them)` : "";
}

function gpuShare(p, machine) {
  const m = machineSpec(machine);
  if (!m || !(m.gpu_count > 1)) return "";
  const used = p.gpus_used || 1;
  const nodes = p.nodes > 1 ? ` on each of ${p.nodes} machines${between(p)}` : "";
  const algorithm = p.allreduce_algorithm ? `, all-reduce ${p.allreduce_algorithm}` : "";
  const l = p.ddp_losses_ms;
  const losses = l ? `; DDP losses ${sig3(p.exposed_allreduce_ms)} ms exposed all-reduce, ${sig3(l.stragglers)} ms `
    + `stragglers, ${sig3(l.bucket_copies + l.contention)} ms bucket copies and contention` : "";
  const scaling = used * (p.nodes || 1) > 1 && typeof p.scaling_efficiency === "number"
    ? `; global batch ${p.global_batch_size}, scaling efficiency ${Math.round(p.scaling_efficiency * 100)}%${algorithm}${losses}` : "";
  return `<br>on ${used} of its ${m.gpu_count} GPUs${nodes}; cost per GPU ${money(p.cost_per_gpu_usd)}${scaling}`;
}

// The input pipeline's share of a step: who sets the step, and the echo factor that would hide it.
function inputLine(p) {
  if (typeof p.input_ms !== "number") return "";
  if (!p.input_bound) return `<br>input pipeline keeps up (${duration(p.input_ms / 1000)} a step)`;
  return `<br><b>input-bound</b>: images take ${duration(p.input_ms / 1000)} a step, ${p.input_bound_ratio.toFixed(1)}× the GPU step;`
    + ` data echoing ×${p.echo_factor} would hide it (up to ${duration(p.echo_total_seconds)} in all, if echoed images help as much as fresh ones)`;
}

export function timeTraces(ctx, points, source) {
  const { name, cnn, machine, unit, s, models, gl, banded } = ctx;
  const src = sourceStyle(source);
  const meta = { cnn, machine, source: source || "benchmarked" };
  const traces = [];
  const withBand = banded ? points.filter((p) => typeof p.total_seconds_p10 === "number" && typeof p.total_seconds_p90 === "number") : [];
  if (withBand.length) {
    // The prediction interval: the upper edge, then the lower edge filled up to it.
    const common = { type: "scatter", mode: "lines", line: { width: 0, color: s.color }, legendgroup: name,
                     showlegend: false, hoverinfo: "skip", meta: { ...meta, role: "band" } };
    traces.push({ ...common, name: `${name} p90`, x: withBand.map((p) => p.batch_size),
                  y: withBand.map((p) => p.total_seconds_p90 / unit.seconds) });
    traces.push({ ...common, name: `${name} p10`, x: withBand.map((p) => p.batch_size),
                  y: withBand.map((p) => p.total_seconds_p10 / unit.seconds), fill: "tonexty",
                  fillcolor: hexToRgba(s.color, s.bandAlpha) });
  }
  const head = `<b>${cnn}</b> on ${machineLine(machine)}`;
  const text = points.map((p) => {
    let t = `${head}<br>batch size ${p.batch_size}<br>training time ${duration(p.total_seconds)}`;
    if (typeof p.total_seconds_p10 === "number" && typeof p.total_seconds_p90 === "number") {
      t += ` (80% interval ${duration(p.total_seconds_p10)}–${duration(p.total_seconds_p90)})`;
    }
    t += `<br>cost ${money(p.cost_usd)}${gpuShare(p, machine)}<br>one iteration ${duration(p.iteration_seconds)}${inputLine(p)}`;
    if (typeof p.energy_kwh === "number") t += `<br>energy ≤ ${sig3(p.energy_kwh)} kWh`;
    t += memoryText(p, machine);
    const from = sourceText(p, machine, models);
    if (from) t += `<br>${from}`;
    return t;
  });
  // Markers on about a dozen points of a long line, enough to tell the shapes apart: evenly spaced as the batch
  // axis draws them (once per power of two on a log axis).
  const bs = points.map((p) => p.batch_size);
  const logAxis = bs.length > 12 && bs[bs.length - 1] / bs[0] >= 8;
  const every = Math.max(1, Math.ceil(points.length / 12));
  const sizes = bs.map((b, i) => {
    const marked = logAxis ? i === 0 || Math.floor(Math.log2(b)) !== Math.floor(Math.log2(bs[i - 1])) : i % every === 0;
    return marked || i === bs.length - 1 ? 7 : 0;
  });
  traces.push({
    type: gl ? "scattergl" : "scatter", mode: "lines+markers", name, legendgroup: name,
    x: points.map((p) => p.batch_size), y: points.map((p) => p.total_seconds / unit.seconds),
    line: { color: s.color, dash: src.dash, width: 2.5 },
    marker: { symbol: markerSymbol(s.symbol, source), size: sizes, color: s.color,
              line: { color: s.color, width: src.open ? 1.5 : 0 } },
    text, hovertemplate: "%{text}<extra></extra>", meta: { ...meta, role: "line" },
  });
  return traces;
}

function memoryText(p, machine) {
  if (typeof p.peak_memory_gib !== "number") return p.fits_in_memory === null ? "<br>fit in memory not checked" : "";
  const device = deviceMemoryGib(machine);
  const of = device ? ` of ${sig3(device)} GiB` : "";
  const fit = p.fits_in_memory === false ? " — does not fit" : p.fits_in_memory === true ? " — fits" : "";
  return `<br>peak memory ${sig3(p.peak_memory_gib)} GiB${of}${fit}`;
}

export function costTrace(ctx, best, all, label) {
  const { name, cnn, machine, unit, s, models } = ctx;
  const t = best.min_time;
  const point = all.find((p) => p.batch_size === t.batch_size) || { ...t };
  const source = t.source || point.source;
  let text = `<b>${cnn}</b> on ${machineLine(machine)}<br>fastest at batch size ${t.batch_size}<br>`
    + `training time ${duration(t.total_seconds)}<br>cost ${money(t.cost_usd)}${gpuShare(point, machine)}`;
  const c = best.min_cost;
  if (c && c.batch_size !== t.batch_size) text += `<br>cheapest at batch size ${c.batch_size}: ${money(c.cost_usd)}`;
  const from = sourceText({ ...point, source }, machine, models);
  if (from) text += `<br>${from}`;
  const open = sourceStyle(source).open;
  return {
    type: "scatter", mode: "markers+text", name, legendgroup: name, x: [t.total_seconds / unit.seconds], y: [t.cost_usd],
    marker: { color: open ? "#ffffff" : s.color, symbol: s.symbol, size: 13,
              line: { color: open ? s.color : "#ffffff", width: open ? 2.5 : 1.5 } },
    // The label beside the point names it; the hover text says the rest.
    text: [label || name], textposition: "top center", textfont: { size: 11, color: s.color }, cliponaxis: false,
    customdata: [text], hovertemplate: "%{customdata}<extra></extra>",
    meta: { role: "point", cnn, machine, source: source || "benchmarked" },
  };
}
