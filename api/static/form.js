// The request form: reading it into a job request, and filling it from one (a page opened with ?job=<id>).

import { $ } from "./util.js";
import { cnnPicker, machinePicker } from "./pickers.js";

export class FormError extends Error {}

function whole(id, label) {
  const text = $(`#${id}`).value.trim();
  if (!/^\d+$/.test(text)) throw new FormError(`${label} must be a whole number (got "${text}")`);
  return Number(text);
}

function batchSizes() {
  if ($('input[name="batch-mode"]:checked').value === "range") {
    return { min: whole("batch-min", "The smallest batch size"), max: whole("batch-max", "The largest batch size"),
             step: whole("batch-step", "The batch size step") };
  }
  const parts = $("#batch-list").value.split(/[\s,;]+/).filter(Boolean);
  if (!parts.length) throw new FormError("write at least one batch size, like 8,16,32");
  if (!parts.every((p) => /^\d+$/.test(p))) {
    throw new FormError(`batch sizes must be whole numbers separated by commas, like 8,16,32 (got "${$("#batch-list").value}")`);
  }
  return parts.map(Number);
}

export function jobRequest() {
  const cnns = cnnPicker.values();
  const machines = machinePicker.values();
  if (!cnns.length) throw new FormError("choose at least one CNN");
  if (!machines.length) throw new FormError("choose at least one machine type");
  const request = {
    cnns, machines,
    batch_sizes: batchSizes(),
    epochs: whole("epochs", "Epochs"),
    dataset_size: whole("dataset-size", "The dataset size"),
    image_size: whole("image-size", "The image size"),
    ...trainingSettings(),
    ...layoutSettings(),
    ...inputSettings(),
    // Unticked (the default): GPU types with no benchmarks of their own are answered at once by the reference.
    wait_for_benchmarks: $("#wait-benchmarks").checked,
  };
  if (request.schedule) delete request.epochs;  // the schedule's epochs are the job's
  return request;
}

// GPUs per machine (empty: all of each machine type's) and machines, each a count or counts to compare.
function layoutSettings() {
  const out = {};
  for (const [id, key, label] of [["gpus", "gpus", "GPUs per machine"], ["nodes", "nodes", "Machines"]]) {
    const text = $(`#${id}`).value.trim();
    if (text === "") continue;
    const parts = text.split(/[\s,;]+/).filter(Boolean);
    if (!parts.every((p) => /^\d+$/.test(p))) {
      throw new FormError(`${label} must be whole numbers separated by commas, like 1,2,4,8 (got "${text}")`);
    }
    out[key] = parts.length === 1 ? Number(parts[0]) : parts.map(Number);
  }
  if ($("#internode-gbps").value.trim() !== "") out.internode_gbps = decimal("internode-gbps", "Between machines Gbit/s");
  if ($("#allreduce").value !== "nccl") out.allreduce = $("#allreduce").value;
  if ($("#torus-x").value.trim() !== "") out.torus_x = whole("torus-x", "Torus X");
  if ($("#deadline-hours").value.trim() !== "") out.deadline_hours = decimal("deadline-hours", "Deadline hours");
  const schedule = $("#schedule").value.trim();
  if (schedule !== "") {
    out.schedule = schedule.split(/[\s,;]+/).filter(Boolean).map((phase) => {
      const m = /^(\d+)x(\d+)$/.exec(phase);
      if (!m) throw new FormError(`Schedule phases are EPOCHSxBATCH in global batches, like 5x256,85x1024 (got "${phase}")`);
      return { epochs: Number(m[1]), batch_size: Number(m[2]) };
    });
    out.schedule_batch = "global";
  }
  if ($("#budget-usd").value.trim() !== "") out.budget_usd = decimal("budget-usd", "Budget $");
  return out;
}

// How images arrive: omitted for images in memory, as before.
function inputSettings() {
  const source = $("#input-source").value;
  // The link's Gbit/s belongs to images read over a network: a value left from before is not sent with another source.
  const gbps = source === "network_jpeg" ? $("#network-gbps").value.trim() : "";
  const workers = $("#dataloader-workers").value.trim();
  if (source === "memory" && gbps === "" && workers === "") return {};
  const spec = { source };
  if (gbps !== "") spec.network_gbps = decimal("network-gbps", "Network Gbit/s");
  if (workers !== "") {
    if (!/^\d+$/.test(workers)) throw new FormError(`Loader workers per GPU must be a whole number (got "${workers}")`);
    spec.dataloader_workers = Number(workers);
  }
  return { input: spec };
}

function decimal(id, label) {
  const text = $(`#${id}`).value.trim();
  const value = Number(text);
  if (text === "" || !Number.isFinite(value) || value < 0) throw new FormError(`${label} must be a number ≥ 0 (got "${text}")`);
  return value;
}

// How the CNN is trained: optimizer (momentum is SGD's only), precision, memory layout and cudnn.benchmark.
function trainingSettings() {
  const optimizer = $("#optimizer").value;
  const settings = { optimizer, precision: $("#precision").value, channels_last: $("#channels-last").checked,
                     cudnn_benchmark: $("#cudnn-benchmark").checked };
  // Empty weight decay: the optimizer's PyTorch default, which the API fills in and echoes.
  if ($("#weight-decay").value.trim() !== "") settings.weight_decay = decimal("weight-decay", "Weight decay");
  if (optimizer === "sgd") settings.momentum = decimal("momentum", "Momentum");
  return settings;
}

export function syncOptimizer() {
  const sgd = $("#optimizer").value === "sgd";
  $("#momentum").disabled = !sgd;
  $("#momentum").title = sgd ? "torch.optim.SGD's momentum; 0 is PyTorch's default" : "momentum is SGD's; Adam and AdamW have their own betas";
}

// Put a job's request back into the form (a page opened with ?job=<id>).
export function fillForm(request) {
  cnnPicker.set(request.cnns || []);
  machinePicker.set(request.machines || []);
  for (const [id, key] of [["epochs", "epochs"], ["dataset-size", "dataset_size"], ["image-size", "image_size"]]) {
    if (request[key] != null) $(`#${id}`).value = request[key];
  }
  if (request.optimizer) $("#optimizer").value = request.optimizer;
  $("#momentum").value = request.momentum ?? 0;
  $("#weight-decay").value = request.weight_decay ?? "";
  if (request.precision) $("#precision").value = request.precision;
  $("#channels-last").checked = Boolean(request.channels_last);
  $("#cudnn-benchmark").checked = Boolean(request.cudnn_benchmark);
  syncOptimizer();
  $("#wait-benchmarks").checked = Boolean(request.wait_for_benchmarks);
  const spec = request.input || {};
  $("#input-source").value = spec.source || "memory";
  $("#network-gbps").value = spec.network_gbps ?? "";
  $("#dataloader-workers").value = spec.dataloader_workers ?? "";
  $("#internode-gbps").value = request.internode_gbps ?? "";
  $("#deadline-hours").value = request.deadline_hours ?? "";
  $("#allreduce").value = request.allreduce || "nccl";
  $("#torus-x").value = request.torus_x ?? "";
  $("#schedule").value = (request.schedule || [])
    .map((p) => `${p.epochs}x${p.global_batch_size || p.batch_size * (p.gpus || 1) * (p.nodes || 1)}`).join(",");
  $("#budget-usd").value = request.budget_usd ?? "";
  for (const key of ["gpus", "nodes"]) {
    const value = request[key];
    $(`#${key}`).value = value == null ? (key === "nodes" ? "1" : "") : [].concat(value).join(",");
  }
  const sizes = request.batch_sizes;
  const range = sizes && !Array.isArray(sizes);
  $(`input[name="batch-mode"][value="${range ? "range" : "list"}"]`).checked = true;
  if (range) {
    $("#batch-min").value = sizes.min;
    $("#batch-max").value = sizes.max;
    $("#batch-step").value = sizes.step || 1;
  } else if (sizes) {
    $("#batch-list").value = sizes.join(",");
  }
  syncBatchMode();
}

export function syncBatchMode() {
  const range = $('input[name="batch-mode"]:checked').value === "range";
  $("#batch-list").hidden = range;
  $("#batch-range").hidden = !range;
}
