// The best-choices table and the machine types' specs table.

import { $, sig3, duration, money, hourly, el } from "./util.js";
import { state, providerName, gpuText } from "./state.js";
import { machinePicker } from "./pickers.js";
import { sourceText } from "./traces.js";

// A chosen batch size and the memory it leaves free (a choice keeps 10% where some batch size does).
function batchCell(pick) {
  const spread = (pick.gpus || 1) > 1 || (pick.nodes || 1) > 1;
  const text = spread ? `${pick.batch_size} per GPU on ${pick.gpus} GPUs × ${pick.nodes}` : String(pick.batch_size);
  const cell = el("td", { class: "num", "data-field": "batch_size", text });
  if (typeof pick.memory_headroom_pct === "number") {
    cell.append(el("small", { class: "headroom", text: ` ${Math.round(pick.memory_headroom_pct)}% memory free` }));
    cell.title = "The memory model errs by a few per cent: a suggested batch size leaves at least 10% of the GPU's "
      + "memory free where some batch size does";
  }
  return cell;
}

const QUESTIONS = {
  fastest: "Fastest", cheapest: "Cheapest",
  cheapest_within_deadline: "Cheapest within the deadline", fastest_within_budget: "Fastest within the budget",
};

// A figure with its P10-P90 band underneath: the band is what the answer means.
function banded(value, low, high, fmt) {
  const cell = el("td", { class: "num", text: fmt(value) });
  if (typeof low === "number" && typeof high === "number") cell.append(el("small", { class: "band", text: ` ${fmt(low)}–${fmt(high)}` }));
  return cell;
}

// On-demand cost, with the spot price's beside it where the catalog has one (spot runs can be interrupted).
function spotted(cell, spot) {
  if (typeof spot === "number") {
    cell.append(el("small", { class: "spot", text: ` spot ${money(spot)}` }));
    cell.title = "At the spot price: spot instances can be interrupted; time lost to interruptions is not in it";
  }
  return cell;
}

// The decision: per CNN and question one winner across every machine type and layout, why, and its ties.
export function renderDecisions(result) {
  const found = result.decisions || [];
  const head = el("tr", {}, ...["CNN", "Question", "Choice", "Time (P10–P90)", "Cost (P10–P90)", "Why"]
    .map((h, i) => el("th", { text: h, class: i === 3 || i === 4 ? "num" : "" })));
  const body = found.map((d) => {
    const w = d.winner;
    const why = el("td", { class: "why" }, ...(w ? d.reasons.slice(1) : d.reasons).map((r) => el("div", { text: r })));
    const cells = w
      ? [el("td", { "data-field": "choice", text: d.reasons[0] }),
         banded(w.total_seconds, w.total_seconds_p10, w.total_seconds_p90, duration),
         spotted(banded(w.cost_usd, w.cost_usd_p10, w.cost_usd_p90, money), w.spot_cost_usd)]
      : [el("td", { colspan: "3", class: "muted", text: "none" })];
    return el("tr", { "data-cnn": d.cnn, "data-question": d.question, "data-machine": w ? w.machine : "" },
              el("td", { text: d.cnn }), el("td", { text: QUESTIONS[d.question] || d.question }), ...cells, why);
  });
  $("#decisions-table").replaceChildren(el("thead", {}, head), el("tbody", {}, ...body));
  $("#decisions").hidden = found.length === 0;
}

export function renderBest(result, cnns, machines, pairs) {
  const models = result.models || {};
  const rows = (result.best || []).slice().sort((a, b) =>
    cnns.indexOf(a.cnn) - cnns.indexOf(b.cnn) || machines.indexOf(a.machine) - machines.indexOf(b.machine));
  // On one machine type the cost is the time × the price: the fastest batch size is nearly always the cheapest
  // too. Then one "best" group of columns; both only where some row's two differ.
  const same = (b) => !b.min_time || !b.min_cost || b.min_time.batch_size === b.min_cost.batch_size;
  const one = rows.every(same);
  const group = (title) => [title, "Time", "Cost", "Energy"];
  const titles = ["CNN", "Machine",
                  ...(one ? group("Best batch size (fastest and cheapest)") : [...group("Fastest batch size"), ...group("Cheapest batch size")]),
                  "Largest batch that fits", "Source"];
  const head = el("tr", {}, ...titles.map((h, i) => el("th", { text: h, class: i >= 2 && i < titles.length - 1 ? "num" : "" })));
  const energy = (v) => (typeof v === "number" ? `≤ ${sig3(v)} kWh` : "—");
  // Energy is the chosen point's (best entries carry time and cost only).
  // The chosen point itself: its batch size in its layout.
  const chosen = (pick, points) => points.find((p) => p.batch_size === pick.batch_size
    && (p.gpus_used || 1) === (pick.gpus || 1) && (p.nodes || 1) === (pick.nodes || 1)) || {};
  const cells = (pick, points) => pick
    ? [batchCell(pick), el("td", { class: "num", text: duration(pick.total_seconds) }),
       spotted(el("td", { class: "num", text: money(pick.cost_usd) }), chosen(pick, points).spot_cost_usd),
       el("td", { class: "num", text: energy(chosen(pick, points).energy_kwh) })]
    : [el("td", { colspan: "4", class: "muted", text: "no prediction" })];
  const largest = (b) => el("td", { class: "num", "data-field": "max_batch_size",
                                    text: typeof b.max_batch_size === "number" ? String(b.max_batch_size) : "—" });
  const body = rows.map((b) => {
    const pick = b.min_time || b.min_cost;
    const points = pairs.get(`${b.cnn}\u0000${b.machine}`) || [];
    const point = (pick && points.find((p) => p.batch_size === pick.batch_size)) || {};
    const source = (pick && pick.source) || point.source || "";
    const text = source ? sourceText({ ...point, source }, b.machine, models) : "—";
    let choice;
    if (one) choice = cells(pick, points);
    else if (b.min_time && b.min_cost && same(b)) {
      choice = [...cells(b.min_time, points), el("td", { colspan: "4", class: "muted", text: "same as the fastest" })];
    } else choice = [...cells(b.min_time, points), ...cells(b.min_cost, points)];
    return el("tr", { "data-cnn": b.cnn, "data-machine": b.machine, "data-source": source },
              el("td", { text: b.cnn }), el("td", { text: b.machine }), ...choice,
              largest(b), el("td", { class: `source ${source}`, text }));
  });
  $("#best-table").replaceChildren(el("thead", {}, head), el("tbody", {}, ...body));
  $("#best").hidden = rows.length === 0;
}

// The specs table: the chosen machine types first, the others behind a toggle.
export function renderMachines() {
  const chosen = new Set(machinePicker.values());
  const head = el("tr", {}, ...["Machine type", "Provider", "GPU", "GPU memory (total)", "vCPUs", "RAM",
                                "On demand per hour", "Spot per hour", "Prices read"]
    .map((h, i) => el("th", { text: h, class: i >= 3 && i <= 7 ? "num" : "" })));
  const num = (v, suffix = "") => el("td", { class: "num", text: v == null ? "—" : `${sig3(v)}${suffix}` });
  const row = (m) => {
    const dated = m.figures_read_on || (m.price_read_at ? String(m.price_read_at).slice(0, 10) : "");
    const spotOn = m.spot_price_read_at ? String(m.spot_price_read_at).slice(0, 10) : "";
    let read = dated || "undated snapshot";
    if (m.registered) read = "given by you";
    else if (m.provider === "local" && !m.price_usd_per_hour) read = "no price (this machine)";
    const priceNote = [m.price_source, dated ? `read on ${dated}` : m.registered ? "" : "the catalog gives no date",
                       spotOn && spotOn !== dated ? `spot price read on ${spotOn}` : ""].filter(Boolean).join(", ");
    const provider = el("td", { text: providerName(m) });
    if (m.region) provider.append(el("small", { text: ` ${m.region}` }));
    return el("tr", { class: chosen.has(m.name) ? "chosen" : "", "data-machine": m.name, "data-provider": m.provider || "" },
      el("td", { text: m.name }),
      provider,
      el("td", { text: m.gpu ? gpuText(m) : (m.provider === "local" ? "none (the agent's own CPU or GPU)" : "none") }),
      num(m.gpu_memory_gib, " GiB"),
      num(m.vcpus),
      num(m.memory_gib, " GiB"),
      el("td", { class: "num", title: priceNote, text: m.price_usd_per_hour ? hourly(m.price_usd_per_hour) : "$0 (free)" }),
      el("td", { class: "num", title: priceNote, text: m.spot_price_usd_per_hour ? hourly(m.spot_price_usd_per_hour) : "—" }),
      el("td", { class: dated ? "small" : "small muted", "data-field": "prices_read", title: priceNote, text: read }));
  };
  // In the order they were chosen from the list (the catalog's), the rest in the catalog's order.
  const mine = state.machines.filter((m) => chosen.has(m.name));
  const others = state.machines.filter((m) => !chosen.has(m.name));
  const first = mine.length ? mine.map(row)
    : [el("tr", { class: "none" }, el("td", { colspan: "9", class: "muted", text: "No machine type chosen yet." }))];
  const rest = el("tbody", { class: "others" }, ...others.map(row));
  rest.hidden = !state.allMachines;
  $("#machine-table").replaceChildren(el("thead", {}, head), el("tbody", { class: "chosen-types" }, ...first), rest);
  const toggle = $("#machine-table-toggle");
  toggle.hidden = others.length === 0;
  toggle.setAttribute("aria-expanded", String(Boolean(state.allMachines)));
  const what = mine.length ? `the other ${others.length} machine types` : `all ${others.length} machine types`;
  toggle.textContent = state.allMachines ? `Hide ${what}` : `Show ${what}`;
}

export function toggleMachines() {
  state.allMachines = !state.allMachines;
  renderMachines();
}
