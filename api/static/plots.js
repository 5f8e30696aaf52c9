// Drawing a result: the batch, cost, memory and GPUs plots, their axes and labels.

import { $, timeUnit, sig3, note, extremes, joinAnd, inOrder } from "./util.js";
import { state } from "./state.js";
import { styles, layoutOf, byPair, gpuTraces, TWIN_DASHES, pointLabel, timeTraces, costTrace } from "./traces.js";
import { memoryTraces } from "./memory.js";
import { renderSourceKey, syncLegends } from "./legends.js";
import { explainGaps } from "./notes.js";
import { renderBest, renderDecisions, renderMachines } from "./tables.js";

function baseLayout(title, xTitle, yTitle) {
  return {
    title: { text: title, x: 0.01, xanchor: "left", font: { size: 15 } },
    font: { family: "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif", size: 13, color: "#1d2733" },
    margin: { l: 72, r: 16, t: 44, b: 56 },
    xaxis: { title: { text: xTitle, font: { size: 13 } }, zeroline: false, gridcolor: "#e6e9ee", automargin: true },
    yaxis: { title: { text: yTitle, font: { size: 13 } }, zeroline: false, gridcolor: "#e6e9ee", automargin: true,
             rangemode: "tozero" },
    // Each plot's own legend, beside it: clicking an entry hides or shows that CNN × machine type in
    // every plot (syncLegends).
    showlegend: true,
    legend: { x: 1.02, xanchor: "left", y: 1, yanchor: "top", font: { size: 11 }, tracegroupgap: 2,
              bgcolor: "rgba(255,255,255,0.85)" },
    hovermode: "closest",
    hoverlabel: { font: { size: 13 }, align: "left" },
    paper_bgcolor: "#ffffff",
    plot_bgcolor: "#ffffff",
  };
}

const PLOT_CONFIG = { responsive: true, displaylogo: false, modeBarButtonsToRemove: ["select2d", "lasso2d"] };
// More lines than this: WebGL (scattergl) draws them, and the interval bands are left to the hover labels.
const MANY_LINES = 30;
const MAX_BANDED_LINES = 12;

function webglWorks() {
  if (state.webgl === undefined) {
    try {
      state.webgl = Boolean(document.createElement("canvas").getContext("webgl"));
    } catch (err) {
      state.webgl = false;
    }
  }
  return state.webgl;
}

function batchAxis(sizes) {
  const lo = Math.min(...sizes);
  const hi = Math.max(...sizes);
  // Batch sizes are usually powers of two: a log axis spaces them evenly once they span a factor of 8.
  const log = hi / lo >= 8;
  let ticks = sizes.length <= 10 ? sizes : null;
  if (!ticks && log) {
    ticks = [];
    for (let p = 1; p <= hi; p *= 2) if (p >= lo) ticks.push(p);
  }
  const axis = { type: log ? "log" : "linear" };
  if (ticks) Object.assign(axis, { tickmode: "array", tickvals: ticks, ticktext: ticks.map(String) });
  return axis;
}

export function render(result, request) {
  state.lastResult = result;
  state.lastRequest = request;
  const predictions = result.predictions || [];
  const models = result.models || {};
  // In the order the request named them (the order of the chips), so colours and legends follow the form.
  const cnns = inOrder((request && request.cnns) || [], [...new Set(predictions.map((p) => p.cnn))]);
  const machines = inOrder((request && request.machines) || [], [...new Set(predictions.map((p) => p.machine))]);
  const style = styles(cnns, machines);
  const pairs = byPair(predictions);
  // Data parallel: the batch sizes are each GPU's, the global batch being that times the GPUs.
  const batchTitle = predictions.some((p) => (p.gpus_used || 1) * (p.nodes || 1) > 1)
    ? "Mini-batch size per GPU (images)" : "Mini-batch size (images)";
  $("#notes").replaceChildren();  // drawn again from this result (render may run twice for one job)
  explainGaps(result, cnns, machines, pairs, request);

  // Left out: no number, or known not to fit. A null fit (reference: memory not modelled) is plotted.
  const drawable = (p) => p.total_seconds != null && p.fits_in_memory !== false;
  let longest = 0;
  let lineCount = 0;
  for (const list of pairs.values()) {
    let any = false;
    for (const p of list) {
      if (!drawable(p)) continue;
      any = true;
      longest = Math.max(longest, p.total_seconds, typeof p.total_seconds_p90 === "number" ? p.total_seconds_p90 : 0);
    }
    if (any) lineCount++;
  }
  for (const b of result.best || []) if (b.min_time) longest = Math.max(longest, b.min_time.total_seconds);
  const unit = timeUnit(longest);
  const gl = lineCount > MANY_LINES && webglWorks();
  const banded = lineCount <= MAX_BANDED_LINES;

  const lineTraces = [];
  const pointTraces = [];
  const sources = new Map();  // source → the machine types drawn from it
  const lows = [];
  const highs = [];
  for (const cnn of cnns) {
    for (const machine of machines) {
      const name = `${cnn} · ${machine}`;
      // Overlapping bands add up: fainter ones when there are many lines.
      const s = { ...style(cnn, machine), bandAlpha: lineCount > 3 ? 0.1 : 0.18 };
      const all = pairs.get(`${cnn}\u0000${machine}`) || [];
      const points = all.filter(drawable);
      const ctx = { name, cnn, machine, unit, s, models, gl, banded };
      if (points.length) {
        // One line per source (normally a CNN × machine has one): the dash says which. Data parallel:
        // one line per GPU and node count too, named by it.
        const layouts = [...new Set(points.map(layoutOf))];
        for (const source of [...new Set(points.map((p) => p.source))]) {
          for (const layout of layouts) {
            const mine = points.filter((p) => p.source === source && layoutOf(p) === layout);
            if (!mine.length) continue;
            const named = layouts.length > 1 ? { ...ctx, name: `${name} · ${layout}` } : ctx;
            lineTraces.push(...timeTraces(named, mine, source));
          }
          const key = source || "benchmarked";
          if (!sources.has(key)) sources.set(key, new Set());
          sources.get(key).add(machine);
        }
        for (const p of points) {
          lows.push((typeof p.total_seconds_p10 === "number" && banded ? p.total_seconds_p10 : p.total_seconds) / unit.seconds);
          highs.push((typeof p.total_seconds_p90 === "number" && banded ? p.total_seconds_p90 : p.total_seconds) / unit.seconds);
        }
      }
      const best = (result.best || []).find((b) => b.cnn === cnn && b.machine === machine);
      if (best && best.min_time) pointTraces.push(costTrace(ctx, best, all, pointLabel(cnn, machine, cnns, machines)));
    }
  }

  separateTwins(lineTraces, pointTraces);
  // Labels on the cost plot's points while they stay readable; beyond that the legend names them.
  if (pointTraces.length > 16) for (const t of pointTraces) t.mode = "markers";
  const hasPlots = lineTraces.length > 0;
  $("#plots-placeholder").hidden = hasPlots;
  $("#plots-placeholder").textContent = hasPlots ? "" : "Nothing to plot: see the notes above.";
  $("#plots").classList.toggle("has-plots", hasPlots);
  if (hasPlots) {
    const requested = [...new Set(predictions.map((p) => p.batch_size))].sort((a, b) => a - b);
    const right = baseLayout("Training time vs mini-batch size", batchTitle,
                             `Predicted training time (${unit.name})`);
    Object.assign(right.xaxis, batchAxis(requested));
    logIfSpread(right.yaxis, lows, highs);
    const left = baseLayout("Fastest batch size: training time vs cost", `Minimum training time (${unit.name})`,
                            "Cost of the training run (US$)");
    Object.assign(left.xaxis, { rangemode: "tozero" });
    const xs = pointTraces.map((t) => t.x[0]);
    logIfSpread(left.xaxis, xs, xs);
    Object.assign(left.yaxis, { tickprefix: "$", separatethousands: true });
    const costs = pointTraces.map((t) => t.y[0]);
    if (costs.every((c) => c === 0)) {
      // All free (the local machine): keep $0 on the axis instead of an empty autoscaled band around it.
      Object.assign(left.yaxis, { range: [-0.05, 1], tickvals: [0], ticktext: ["$0"] });
    } else if (costs.every((c) => c > 0)) {
      // Real prices span cents to thousands of dollars: a log axis keeps the cheap ones apart.
      logIfSpread(left.yaxis, costs, costs, "$");
    } else {
      // Free and priced machine types together: room under $0 so a free one's marker is not cut by the axis.
      const top = extremes(costs)[1];
      Object.assign(left.yaxis, { rangemode: "normal", range: [-0.05 * top, 1.08 * top] });
    }
    placeLabels(pointTraces, left);
    Plotly.react("plot-batch", lineTraces, right, PLOT_CONFIG);
    Plotly.react("plot-cost", pointTraces, left, PLOT_CONFIG);
  } else {
    Plotly.purge("plot-batch");
    Plotly.purge("plot-cost");
  }
  state.usableMemory = new Map((result.best || []).filter((b) => typeof b.memory_gib === "number")
    .map((b) => [b.machine, b.memory_gib]));
  const memory = hasPlots ? memoryTraces(cnns, machines, pairs) : [];
  $("#plot-memory").hidden = memory.length === 0;
  if (memory.length) {
    const layout = baseLayout("Peak memory vs mini-batch size (dotted: each GPU's memory)", batchTitle,
                              "Predicted peak memory (GiB)");
    Object.assign(layout.xaxis, batchAxis([...new Set(predictions.map((p) => p.batch_size))].sort((a, b) => a - b)));
    const ys = memory.flatMap((t) => t.y);
    logIfSpread(layout.yaxis, ys, ys);
    Plotly.react("plot-memory", memory, layout, PLOT_CONFIG);
  } else {
    Plotly.purge("plot-memory");
  }
  renderGpus(hasPlots ? gpuTraces(cnns, machines, pairs, style, drawable, unit) : [], unit);
  renderSourceKey(hasPlots ? sources : new Map(), result);
  state.hidden = new Set();  // a new result shows every line
  syncLegends();
  renderDecisions(result);
  renderBest(result, cnns, machines, pairs);
  renderMachines();
}

function renderGpus(traces, unit) {
  $("#plot-gpus").hidden = traces.length === 0;
  if (!traces.length) {
    Plotly.purge("plot-gpus");
    return;
  }
  const layout = baseLayout("Fastest training time vs GPUs (GPUs per machine × machines)", "GPUs",
                            `Predicted training time (${unit.name})`);
  const gpus = [...new Set(traces.flatMap((t) => t.x))].sort((a, b) => a - b);
  Object.assign(layout.xaxis, batchAxis(gpus));
  Plotly.react("plot-gpus", traces, layout, PLOT_CONFIG);
}

// Values a factor of 30 or more apart: a linear axis would flatten the small ones onto zero, so use a log axis.
function logIfSpread(axis, lows, highs, prefix = "") {
  const lo = extremes(lows)[0];
  const hi = extremes(highs)[1];
  if (!(lo > 0) || hi / lo < 30) return;
  const ticks = logTicks(lo, hi);
  Object.assign(axis, { type: "log", tickmode: "array", tickvals: ticks, ticktext: ticks.map((t) => prefix + sig3(t)),
                        rangemode: "normal" });
  axis.title.text = axis.title.text.replace(/\)$/, ", log scale)");
}

function separateTwins(lineTraces, pointTraces) {
  const curve = (t) => `${t.x.join(",")}|${t.y.map((v) => Number(v).toPrecision(6)).join(",")}`;
  const groups = new Map();
  for (const t of lineTraces) {
    if (t.meta.role !== "line") continue;
    const key = curve(t);
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(t);
  }
  const said = new Set();  // several layouts of the same machine types coincide alike: one note says it once
  for (const twins of groups.values()) {
    // Any two lines on one curve: machine types answered alike, two CNNs with one graph, or layouts that coincide.
    if (twins.length < 2) continue;
    const machines = [...new Set(twins.map((t) => t.meta.machine))];
    twins.forEach((t, k) => {
      const others = twins.filter((o) => o !== t).map((o) => o.name);
      t.meta.twins = others;
      if (k > 0) t.line = { ...t.line, dash: TWIN_DASHES[(k - 1) % TWIN_DASHES.length], width: 3 };
      t.text = t.text.map((text) => `${text}<br>same prediction as ${others.join(", ")}: the lines coincide`);
    });
    const cnns = [...new Set(twins.map((t) => t.meta.cnn))];
    const text = machines.length > 1
      ? `${joinAnd(machines)} have equal predicted times for ${joinAnd(cnns)}: their lines coincide, drawn `
        + "with different dashes."
      : `${joinAnd(twins.map((t) => t.name))} have equal predicted times: their lines coincide, drawn with different `
        + "dashes.";
    if (!said.has(text)) note(text, "info", "");
    said.add(text);
  }
  const spots = new Map();
  for (const t of pointTraces) {
    const key = `${Number(t.x[0]).toPrecision(6)},${Number(t.y[0]).toPrecision(6)}`;
    if (!spots.has(key)) spots.set(key, []);
    spots.get(key).push(t);
  }
  for (const twins of spots.values()) {
    if (twins.length < 2) continue;
    twins.forEach((t, k) => {
      // The first marker largest: each later one sits inside it, all visible.
      t.marker = { ...t.marker, size: Math.max(5, 15 - 4 * k) };
      t.customdata = [`${t.customdata[0]}<br>same point as ${twins.filter((o) => o !== t).map((o) => o.name).join(", ")}`];
      t.text = [k === 0 ? twins.map((o) => o.text[0]).join(" = ") : ""];
    });
  }
}

// Where each cost point's label goes (above or below, left or right of it) so labels do not cover each other: the
// first place free of the labels placed before, estimated from the plot's size (plotly does not move text itself).
function placeLabels(points, layout) {
  const labelled = points.filter((t) => t.mode.includes("text") && t.text[0]);
  if (labelled.length < 2) return;
  const box = document.getElementById("plot-cost");
  const legendWidth = 40 + 6.5 * Math.max(...points.map((t) => t.name.length));
  const width = Math.max(200, (box.clientWidth || 600) - 90 - legendWidth);
  const height = Math.max(150, (box.clientHeight || 440) - 110);
  const scale = (axis, values) => {
    const log = axis.type === "log";
    const f = (v) => (log ? Math.log10(Math.max(v, 1e-12)) : v);
    const range = axis.range ? [axis.range[0], axis.range[1]] : (() => {
      const [lo, hi] = extremes(values.map(f));
      const pad = (hi - lo || 1) * 0.06;
      return [axis.rangemode === "tozero" && !log ? Math.min(0, lo) : lo - pad, hi + pad];
    })();
    return (v) => (f(v) - range[0]) / (range[1] - range[0] || 1);
  };
  const sx = scale(layout.xaxis, points.map((t) => t.x[0]));
  const sy = scale(layout.yaxis, points.map((t) => t.y[0]));
  // The markers themselves are taken too.
  const taken = points.map((t) => [sx(t.x[0]) * width - 6, sy(t.y[0]) * height - 6, sx(t.x[0]) * width + 6,
                                   sy(t.y[0]) * height + 6]);
  // How much of a label's box others cover: the place with the least wins, the first of equals.
  const covered = (a) => taken.reduce((sum, b) => sum + Math.max(0, Math.min(a[2], b[2]) - Math.max(a[0], b[0]))
    * Math.max(0, Math.min(a[3], b[3]) - Math.max(a[1], b[1])), 0);
  for (const t of labelled.slice().sort((a, b) => a.x[0] - b.x[0])) {
    const px = sx(t.x[0]) * width;
    const py = sy(t.y[0]) * height;
    const w = 6.5 * t.text[0].length;
    const h = 14;
    const right = px + w < width;
    const candidates = [
      [right ? "top right" : "top left", right ? px + 3 : px - 3 - w, py + 7],
      [right ? "bottom right" : "bottom left", right ? px + 3 : px - 3 - w, py - 7 - h],
      [right ? "top left" : "top right", right ? px - 3 - w : px + 3, py + 7],
      [right ? "bottom left" : "bottom right", right ? px - 3 - w : px + 3, py - 7 - h],
      ["top center", px - w / 2, py + 8],
      ["bottom center", px - w / 2, py - 8 - h],
    ];
    // Inside the plot area (a label past its left edge is cut; past its right edge it runs into the legend).
    const inside = candidates.filter(([, x, y]) => x >= -4 && x + w <= width + 4 && y >= -10 && y + h <= height + 10);
    const options = inside.length ? inside : candidates;
    let free = options[0];
    let least = Infinity;
    for (const option of options) {
      const area = covered([option[1], option[2], option[1] + w, option[2] + h]);
      if (area < least) [free, least] = [option, area];
    }
    t.textposition = free[0];
    taken.push([free[1], free[2], free[1] + w, free[2] + h]);
  }
}

// 1, 2, 5, 10, 20, 50, … covering [lo, hi]: plotly's own log ticks label every digit and crowd the axis.
function logTicks(lo, hi) {
  const ticks = [];
  for (let decade = 10 ** Math.floor(Math.log10(lo)); decade <= hi; decade *= 10) {
    for (const m of [1, 2, 5]) {
      const v = m * decade;
      if (v >= lo / 1.5 && v <= hi * 1.5) ticks.push(Number(v.toPrecision(3)));
    }
  }
  return ticks;
}
