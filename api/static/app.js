// The Traincast web page: pick CNNs and machine types, submit a job, follow it, plot the result.
// Plain JS modules against the public HTTP API, no bundler; every URL is relative so the page also works behind a
// path prefix. This entry module wires the page up; the others each own one concern (see docs/WEB.md).

import { $, showError, setState } from "./util.js";
import { showKeyForm, saveKey, api } from "./api.js";
import { upload, addGpu, loadLists } from "./lists.js";
import { syncOptimizer, fillForm, syncBatchMode } from "./form.js";
import { search, follow, cancel, showProgress, waitingMachines } from "./jobs.js";
import { renderMachines, toggleMachines } from "./tables.js";
import { render } from "./plots.js";
import { state } from "./state.js";
import { cnnPicker, machinePicker } from "./pickers.js";

async function start() {
  $("#key-form").addEventListener("submit", (event) => saveKey(event, loadLists));
  $("#key-change").addEventListener("click", () => showKeyForm(""));
  $("#search-form").addEventListener("submit", search);
  $("#cancel").addEventListener("click", cancel);
  $("#upload-form").addEventListener("submit", upload);
  $("#gpu-form").addEventListener("submit", addGpu);
  $("#machine-table-toggle").addEventListener("click", toggleMachines);
  for (const radio of document.querySelectorAll('input[name="batch-mode"]')) radio.addEventListener("change", syncBatchMode);
  $("#optimizer").addEventListener("change", syncOptimizer);
  syncOptimizer();
  machinePicker.onChange = renderMachines;
  if (typeof Plotly === "undefined") {
    showError("The plotting library did not load", "static/plotly.min.js could not be fetched from the server");
  }
  try {
    await loadLists();
    setState("loading");
  } catch (err) {
    showError(err.title || "Could not load the lists", err.message);
    setState("error");
    return;
  }
  const jobId = new URLSearchParams(location.search).get("job");
  if (jobId) {
    try {
      const { data } = await api("GET", `v1/jobs/${encodeURIComponent(jobId)}`);
      fillForm(data.request || {});
      follow(jobId, data.request);
      return;
    } catch (err) {
      showError(err.title, err.message);
    }
  }
  setState("idle");
}

// For tests and the console: the state and the renderer (e.g. to draw a result by hand).
window.traincast = { state, render, cnnPicker, machinePicker, showProgress, waitingMachines };
start();
