// The memory plot's traces: peak memory per CNN and each device's memory as a dotted line.

import { sig3, extremes, listed } from "./util.js";
import { deviceMemoryGib, deviceName } from "./state.js";
import { SYMBOLS, colour, sourceStyle, markerSymbol, TWIN_DASHES } from "./traces.js";

// Peak memory against batch size, one line per CNN: the memory model mostly answers the same for every
// machine type, so machine types whose curves are equal share a line, named by them when a CNN needs several.
// Each device memory is one dotted line labelled with the GPUs that have it (points that do not fit are drawn too:
// that is the question this plot answers).
export function memoryTraces(cnns, machines, pairs) {
  const traces = [];
  const limits = new Map();  // GiB (3 significant digits) → {gib, names: Set, machines: []}
  cnns.forEach((cnn, ci) => {
    const curves = new Map();  // the curve → its machine types and points
    for (const machine of machines) {
      const points = (pairs.get(`${cnn}\u0000${machine}`) || []).filter((p) => typeof p.peak_memory_gib === "number");
      if (!points.length) continue;
      const key = points.map((p) => `${p.batch_size}:${p.peak_memory_gib.toPrecision(6)}`).join(",");
      if (!curves.has(key)) curves.set(key, { machines: [], points, byMachine: new Map() });
      const curve = curves.get(key);
      curve.machines.push(machine);
      curve.byMachine.set(machine, new Map(points.map((p) => [p.batch_size, p])));
      const gib = deviceMemoryGib(machine);
      if (gib) {
        const at = sig3(gib);
        if (!limits.has(at)) limits.set(at, { gib, names: new Set(), machines: [] });
        limits.get(at).names.add(deviceName(machine));
        limits.get(at).machines.push(machine);
      }
    }
    const color = colour(ci, cnns.length);
    const several = curves.size > 1;
    [...curves.values()].forEach((curve, k) => {
      const name = several ? `${cnn} · ${listed(curve.machines, 3)}` : cnn;
      const source = curve.points[0].source;
      const src = sourceStyle(source);
      traces.push({
        type: "scatter", mode: "lines+markers", name, legendgroup: name,
        x: curve.points.map((p) => p.batch_size), y: curve.points.map((p) => p.peak_memory_gib),
        line: { color, dash: src.dash, width: 2 },
        marker: { symbol: markerSymbol(SYMBOLS[(several ? k : ci) % SYMBOLS.length], source), size: 6, color },
        text: curve.points.map((p) => `<b>${cnn}</b> on ${listed(curve.machines, 4)}<br>batch size ${p.batch_size}`
          + `<br>peak memory ${sig3(p.peak_memory_gib)} GiB${fitText(curve, p.batch_size)}`),
        hovertemplate: "%{text}<extra></extra>", meta: { cnn, machines: curve.machines, role: "memory" },
      });
    });
  });
  // Two CNNs with equal peaks: the later line gets a dash of its own.
  const seen = new Map();
  for (const t of traces) {
    const key = `${t.x.join(",")}|${t.y.map((v) => v.toPrecision(6)).join(",")}`;
    const k = seen.get(key) || 0;
    if (k > 0) t.line.dash = TWIN_DASHES[(k - 1) % TWIN_DASHES.length];
    seen.set(key, k + 1);
  }
  const xs = traces.flatMap((t) => t.x);
  if (!xs.length) return traces;
  const [lo, hi] = extremes(xs);
  for (const { gib, names, machines: on } of [...limits.values()].sort((a, b) => a.gib - b.gib)) {
    const label = `${[...names].join(", ")}: ${sig3(gib)} GiB`;
    traces.push({
      type: "scatter", mode: "lines+text", name: label, x: [lo, hi], y: [gib, gib], showlegend: false,
      line: { color: "#6b7785", dash: "dot", width: 1.5 },
      text: ["", label], textposition: "top left", textfont: { size: 11, color: "#4a5563" }, cliponaxis: false,
      hovertemplate: `${label} per device (${listed(on, 4)})<extra></extra>`,
      meta: { role: "limit", gpus: [...names], machines: on },
    });
  }
  return traces;
}

// Per machine type of a shared memory line: whether the point fits its device.
function fitText(curve, batchSize) {
  const fits = [];
  const misfits = [];
  for (const machine of curve.machines) {
    const p = curve.byMachine.get(machine).get(batchSize);
    const device = deviceMemoryGib(machine);
    const where = device ? `${machine} (${deviceName(machine)}, ${sig3(device)} GiB)` : machine;
    if (p && p.fits_in_memory === false) misfits.push(where);
    else if (p && p.fits_in_memory === true) fits.push(where);
  }
  return (fits.length ? `<br>fits on ${listed(fits, 4)}` : "")
    + (misfits.length ? `<br>does not fit on ${listed(misfits, 4)}` : "");
}
