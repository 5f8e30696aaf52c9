// The notes above the plots: where the numbers come from, and why some points are missing.

import { sig3, capitalize, note, joinAnd, sizeRuns, listed, duration, money } from "./util.js";
import { machineSpec } from "./state.js";

// The settings a result's answers are for, in PyTorch's words, the defaults named as such.
export function settingsText(t) {
  const extras = [t.momentum ? `momentum ${t.momentum}` : "", t.weight_decay ? `weight decay ${t.weight_decay}` : ""]
    .filter(Boolean);
  return [`${t.optimizer || "sgd"}${extras.length ? ` (${extras.join(", ")})` : ""}`, t.precision || "fp32",
          t.channels_last ? "channels_last" : "NCHW (default)",
          t.cudnn_benchmark ? "cudnn.benchmark on" : "cudnn.benchmark off (default)"].join(", ");
}

// Say where the numbers come from, and why a CNN × machine × batch size has no point: no model for the machine,
// or out of memory.
export function explainGaps(result, cnns, machines, pairs, request) {
  const models = result.models || {};
  // A type with fewer GPUs than some counts asked is answered for those it holds: say which lines it has not.
  const asked = request && Array.isArray(request.gpus) ? request.gpus : [];
  for (const machine of machines) {
    const held = new Set((result.predictions || []).filter((p) => p.machine === machine).map((p) => p.gpus_used));
    const lacking = asked.filter((g) => !held.has(g));
    if (held.size && lacking.length) {
      note(`${machine} has fewer GPUs than ${lacking.join(" and ")}: it is drawn for ${[...held].sort((a, b) => a - b)
        .join(" and ")} GPU${held.size > 1 || !held.has(1) ? "s" : ""} only.`, "info", `fewer-gpus-${machine}`);
    }
  }
  if (result.training) note(`Answers are for ${settingsText(result.training)}.`, "info", "settings-note");
  const requested = [...new Set((result.predictions || []).map((p) => p.batch_size))].sort((a, b) => a - b);
  const reference = machines.filter((m) => models[m] && models[m].status === "reference");
  for (const machine of machines) {
    const model = models[machine];
    if (model && model.status !== "ok" && model.status !== "reference") {
      note(`${capitalize(model.detail || `no predictor model for ${machine}`)}. Its times are not plotted.`, "warning");
    }
  }
  if (reference.length === 1) {
    note(`${capitalize(models[reference[0]].detail)}. Drawn dashed, with open markers.`, "reference", "reference-note");
  } else if (reference.length > 1) {
    const mape = models[reference[0]].whole_step_mape;
    note(`${listed(reference)} have no benchmarks of their own yet: reference predictions from public measurements `
      + `of other GPUs${typeof mape === "number" ? `, ${sig3(mape)}% mean error on held-out public whole training steps` : ""}. `
      + "Drawn dashed, with open markers.", "reference", "reference-note");
  }
  const multi = machines.filter((m) => { const s = machineSpec(m); return s && s.gpu_count > 1; });
  if (multi.length && result.gpu_note) {
    // In the page's words, not the API's field names.
    note(`${listed(multi)} ${multi.length > 1 ? "have" : "has"} several GPUs: a point trains on the GPUs (and machines) `
      + "its layout names, with batch sizes per GPU; its cost is the price of every machine it uses for that time, "
      + "and the cost per GPU is each GPU's share.", "info", "gpu-note");
  }
  for (const cnn of cnns) {
    for (const machine of machines) {
      if (models[machine] && !["ok", "reference"].includes(models[machine].status)) continue;
      const mine = pairs.get(`${cnn}\u0000${machine}`) || [];
      const oom = mine.filter((p) => p.fits_in_memory === false).map((p) => p.batch_size);
      if (oom.length) {
        const spec = machineSpec(machine);
        const memory = spec && spec.gpu ? "GPU memory" : "memory";
        note(`${cnn} on ${machine} does not fit in ${memory} at batch size${oom.length > 1 ? "s" : ""} `
          + `${sizeRuns(oom, requested)}: not plotted.`, "warning");
      }
      const other = mine.filter((p) => p.fits_in_memory !== false && p.total_seconds == null).map((p) => p.batch_size);
      if (other.length) note(`${cnn} on ${machine} has no prediction at batch sizes ${sizeRuns(other, requested)}.`, "warning");
    }
  }
  for (const sched of result.schedules || []) {
    const phases = sched.phases.map((p) => `${p.epochs} epochs at global batch ${p.batch_size * p.gpus * p.nodes} `
      + `(${p.batch_size} per GPU on ${p.gpus} GPUs × ${p.nodes})`).join(", then ");
    const total = sched.total_seconds == null ? `no total (${sched.missing})`
      : `${duration(sched.total_seconds)}, ${money(sched.cost_usd)}`;
    const best = sched.best_constant;
    const beside = best ? `; the best constant batch (${best.batch_size} per GPU on ${best.gpus} GPUs × ${best.nodes}): `
      + `${duration(best.total_seconds)}, ${money(best.cost_usd)}` : "";
    note(`Schedule for ${sched.cnn} on ${sched.machine}: ${phases}: ${total}${beside}.`, "info", "");
  }
  const free = machines.filter((m) => { const s = machineSpec(m); return s && !s.price_usd_per_hour; });
  if (free.length) note(`${listed(free)} ${free.length > 1 ? "have" : "has"} no hourly price, so ${free.length > 1 ? "their" : "its"} cost is $0.`);
  // In plain words: what each fitted model learnt from; the model's kind is in the note's tooltip.
  const fittedOn = machines.filter((m) => models[m] && models[m].status === "ok");
  const fitted = fittedOn.map((m) => {
    const model = models[m];
    const figures = [typeof model.loco_mape === "number" ? `leave-one-CNN-out error ${sig3(model.loco_mape)}%` : "",
                     typeof model.interval_coverage === "number"
                       ? `${Math.round(model.interval_coverage * 100)}% of held-out steps inside P10–P90` : ""]
      .filter(Boolean);
    const pooled = (model.pooled_from || []).filter(Boolean);
    let learnt = "its own measured steps";
    if (model.measured_on && model.measured_on !== m) {
      learnt = `the steps measured on ${model.measured_on} (the same ${machineSpec(m) && machineSpec(m).gpu ? "GPU" : "hardware"})`;
    } else if (pooled.length > 1 || (pooled.length === 1 && pooled[0] !== m)) {
      learnt = `measured steps of ${joinAnd(pooled.length > 6 ? [...pooled.slice(0, 6), `${pooled.length - 6} more`] : pooled)}`
        + " (too few of its own)";
    }
    return `${m}: model v${model.version} fitted on ${learnt}${figures.length ? ` (${figures.join(", ")})` : ""}`;
  });
  if (fitted.length) {
    const li = note(`Predictor model${fitted.length > 1 ? "s" : ""}: ${fitted.slice(0, 8).join("; ")}`
      + `${fitted.length > 8 ? `; and ${fitted.length - 8} more` : ""}.`, "info", "model-note");
    li.title = fittedOn.map((m) => `${m}: model kind ${models[m].kind}`).join("\n");
  }
}
