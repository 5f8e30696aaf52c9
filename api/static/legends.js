// The line-style key and the legends: hiding a CNN × machine type in one plot hides it in every plot.

import { $, sig3, el } from "./util.js";
import { state, machineSpec } from "./state.js";
import { sourceStyle } from "./traces.js";

// The key to the line styles: which numbers were measured and which come from the reference predictor.
export function renderSourceKey(sources, result) {
  const box = $("#source-key");
  const mape = Object.values(result.models || {}).map((m) => m.whole_step_mape).find((v) => typeof v === "number");
  const entries = [];
  if (sources.has("benchmarked")) {
    // Where the measuring was done: a CPU machine type (local) on this machine's CPU, a GPU type on its GPU model.
    const measured = [...sources.get("benchmarked")].map(machineSpec);
    const cpu = measured.some((m) => m && !m.gpu);
    const gpu = measured.some((m) => !m || m.gpu);
    const where = [cpu ? "on this machine's CPU" : "", gpu ? "on the machine type's GPU model" : ""].filter(Boolean);
    entries.push(["benchmarked", `benchmarked: from layer and step benchmarks measured ${where.join(" or ")}`]);
  }
  if (sources.has("reference")) {
    entries.push(["reference", "reference: learnt from public measurements of other GPUs; the shaded band is"
      + " each point's P10–P90 from held-out steps of its kind"]);
  }
  box.hidden = entries.length === 0;
  box.replaceChildren(...entries.map(([source, text]) => {
    const item = el("span", { class: "key-item", "data-source": source });
    item.append(swatch({ color: "#5c6773", symbol: "circle", source }), el("span", { text }));
    return item;
  }));
}

const PLOT_IDS = ["plot-batch", "plot-cost", "plot-memory", "plot-gpus"];

// Whether a trace shows, given the CNN × machine types hidden (state.hidden): a memory line serves several
// machine types and hides when all of them are hidden; a GPU's memory limit always shows.
function shownTrace(meta) {
  if (!meta || !meta.cnn) return true;
  const machines = meta.machines || (meta.machine ? [meta.machine] : []);
  return !machines.length || machines.some((m) => !state.hidden.has(`${meta.cnn}\u0000${m}`));
}

// Each plot's legend hides or shows a CNN × machine type in every plot, not only its own.
export function syncLegends() {
  for (const id of PLOT_IDS) {
    const plot = document.getElementById(id);
    if (!plot || !plot.data || typeof plot.on !== "function") continue;
    if (plot.removeAllListeners) plot.removeAllListeners("plotly_legendclick");
    plot.on("plotly_legendclick", (event) => {
      const meta = event.data[event.curveNumber] && event.data[event.curveNumber].meta;
      if (!meta || !meta.cnn) return true;  // a GPU's memory line: plotly's own toggle
      const machines = meta.machines || [meta.machine];
      const keys = machines.map((m) => `${meta.cnn}\u0000${m}`);
      const hide = shownTrace(meta);
      for (const key of keys) hide ? state.hidden.add(key) : state.hidden.delete(key);
      applyHidden();
      return false;
    });
  }
}

function applyHidden() {
  for (const id of PLOT_IDS) {
    const plot = document.getElementById(id);
    if (!plot || !plot.data) continue;
    const indices = [];
    const visible = [];
    plot.data.forEach((t, i) => {
      if (!t.meta || !t.meta.cnn) return;
      const want = shownTrace(t.meta) ? true : "legendonly";
      if ((t.visible === undefined ? true : t.visible) !== want) {
        indices.push(i);
        visible.push(want);
      }
    });
    if (indices.length) Plotly.restyle(id, { visible }, indices);
  }
}

const DASH_ARRAYS = { solid: "", dash: "6 3" };
const SYMBOL_PATHS = {
  circle: "M21 7a4 4 0 1 1-8 0a4 4 0 1 1 8 0Z",
  square: "M13.5 3.5h7v7h-7Z",
  diamond: "M17 2.5l4.5 4.5-4.5 4.5-4.5-4.5Z",
  "triangle-up": "M17 2.5l4.5 8h-9Z",
  cross: "M15.5 2.5h3v3h3v3h-3v3h-3v-3h-3v-3h3Z",
  star: "M17 2l1.3 3.2 3.4.2-2.6 2.2.9 3.4-3-1.9-3 1.9.9-3.4-2.6-2.2 3.4-.2Z",
};

// A short line in the trace's colour and its source's dash with its marker (open for reference); built by the
// HTML parser, which puts <svg> in the SVG namespace itself. Every value comes from the constants above.
function swatch(style) {
  const src = sourceStyle(style.source);
  const holder = document.createElement("span");
  holder.className = "swatch";
  const fill = src.open ? `fill="#ffffff" stroke="${style.color}" stroke-width="1.5"` : `fill="${style.color}"`;
  holder.innerHTML = `<svg width="34" height="14" aria-hidden="true">`
    + `<line x1="1" y1="7" x2="33" y2="7" stroke="${style.color}" stroke-width="2.5"`
    + ` stroke-dasharray="${DASH_ARRAYS[src.dash]}"></line>`
    + `<path d="${SYMBOL_PATHS[style.symbol]}" ${fill}></path></svg>`;
  return holder;
}
