// Submitting a job and following it (long polls, progress, cancel); the URL keeps it as ?job=<id>.

import { $, el, showError, clearMessages, setState } from "./util.js";
import { state } from "./state.js";
import { api } from "./api.js";
import { FormError, jobRequest } from "./form.js";
import { render } from "./plots.js";

const POLL_DEFAULT_S = 2;
export async function search(event) {
  event.preventDefault();
  clearMessages();
  let request;
  try {
    request = jobRequest();
  } catch (err) {
    if (!(err instanceof FormError)) throw err;
    showError("Check the form", err.message);
    setState("error");
    return;
  }
  setState("submitting");
  try {
    const { data } = await api("POST", "v1/jobs", request);
    follow(data.id, request);
  } catch (err) {
    showError(err.title || "The job was not accepted", err.message);
    setState("error");
  }
}

export async function follow(jobId, request) {
  const generation = ++state.generation;
  state.jobId = jobId;
  history.replaceState(null, "", `?job=${encodeURIComponent(jobId)}`);
  setState("running");
  showProgress({ status: "queued", progress: null }, null);
  let failures = 0;
  let holdS = 0; // the first read answers at once; later ones are long polls (?wait)
  while (generation === state.generation) {
    let job, response;
    const began = Date.now();
    try {
      const wait = holdS ? `?wait=${holdS}` : "";
      ({ data: job, response } = await api("GET", `v1/jobs/${encodeURIComponent(jobId)}${wait}`));
      // A read answered after Cancel or a new Search (a long poll is nearly always in flight) changes nothing.
      if (generation !== state.generation) return;
      failures = 0;
      $("#error").hidden = true;
    } catch (err) {
      if (generation !== state.generation) return;
      // The job goes on on the server whatever happens here: ride out a restart or a network blip.
      const transient = err.status === 0 || err.status >= 500;
      if (transient && ++failures < 10) {
        showError(err.title, `${err.message} (trying again)`);
        await new Promise((resolve) => setTimeout(resolve, 2000 * failures));
        continue;
      }
      showError(err.title, err.message);
      setState("error");
      return;
    }
    if (generation !== state.generation) return;
    if (job.status === "succeeded") {
      $("#progress").hidden = true;
      render(job.result, job.request || request);
      setState("done");
      return;
    }
    if (job.status === "failed") {
      $("#progress").hidden = true;
      showError("The job failed", job.error || "no reason was given");
      setState("error");
      return;
    }
    if (job.status === "canceled") {
      $("#progress").hidden = true;
      showError("The job was canceled", "submit it again with Search to restart it");
      setState("error");
      return;
    }
    const agents = await waitingMachines(job);
    if (generation !== state.generation) return;
    showProgress(job, agents);
    // The next read asks the API to hold it until the job ends or Retry-After's seconds pass (0.5-10 s
    // whatever it says), so the end shows at once and the progress every few seconds. An answer that came
    // back sooner than asked while the job runs (a proxy that does not hold) waits out the rest here.
    const asked = holdS;
    const after = Number(response.headers.get("retry-after"));
    holdS = Math.min(10, Math.max(0.5, Number.isFinite(after) && after > 0 ? after : POLL_DEFAULT_S));
    const rest = asked * 1000 - (Date.now() - began);
    if (rest > 0) await new Promise((resolve) => setTimeout(resolve, rest));
  }
}

// Machine types with pending layer benchmarks and no live agent; null when /v1/agents cannot tell.
export async function waitingMachines(job) {
  const perMachine = (job.progress && job.progress.machines) || {};
  // A machine type answered by the reference predictor is not waiting for anything.
  const pending = Object.keys(perMachine).filter((m) => perMachine[m].pending > 0 && perMachine[m].answered_by !== "reference");
  if (!pending.length) return { waiting: new Set(), alive: {} };
  try {
    const { data } = await api("GET", "v1/agents?limit=500");
    const alive = {};
    for (const a of data.agents || []) if (a.alive) alive[a.machine_type] = (alive[a.machine_type] || 0) + 1;
    return { waiting: new Set(pending.filter((m) => !alive[m])), alive };
  } catch (err) {
    return null;  // older API or an error: show the counts only
  }
}

export function showProgress(job, agents) {
  const box = $("#progress");
  box.hidden = false;
  const lb = job.progress && job.progress.layer_benchmarks;
  const bar = $(".bar", box);
  const span = $(".bar span", box);
  if (!lb) {
    $("#progress-text").textContent = job.status === "queued" ? "Queued: reading the CNNs' layers…" : "Starting…";
    span.style.width = "0%";
    bar.setAttribute("aria-valuenow", "0");
    $("#machine-progress").replaceChildren();
    return;
  }
  const pct = lb.needed ? Math.round((100 * lb.done) / lb.needed) : 100;
  span.style.width = `${pct}%`;
  bar.setAttribute("aria-valuenow", String(pct));
  $("#progress-text").textContent = lb.pending
    ? `Measuring layers: ${lb.done} of ${lb.needed} layer benchmarks done`
    : "All layers measured: predicting…";
  const rows = Object.entries(job.progress.machines || {}).map(([machine, p]) => {
    const li = el("li", { "data-machine": machine });
    let text = `${machine}: ${p.done} of ${p.needed} measured`;
    if (p.pending > 0 && p.answered_by === "reference") {
      li.className = "reference";
      text += " — answered now by the reference prediction; its benchmarks are measured later, where an agent can";
    } else if (p.pending > 0 && agents && agents.waiting.has(machine)) {
      li.className = "waiting";
      // The worker names the instance when the AWS fleet has launched one for this machine type.
      text += p.waiting_for && p.waiting_for.includes("fleet")
        ? ` — ${p.waiting_for}`
        : ` — waiting for an agent: no benchmark agent for ${machine} is running`;
    } else if (p.pending > 0 && agents) {
      const n = agents.alive[machine];
      text += `, ${p.pending} pending (${n} agent${n === 1 ? "" : "s"} measuring)`;
    } else if (p.pending > 0) {
      text += `, ${p.pending} pending`;
    }
    li.textContent = text;
    return li;
  });
  $("#machine-progress").replaceChildren(...rows);
}

export async function cancel() {
  if (!state.jobId) return;
  const jobId = state.jobId;
  state.generation++;  // stop following
  try {
    await api("POST", `v1/jobs/${encodeURIComponent(jobId)}/cancel`);
    $("#progress").hidden = true;
    showError("The job was canceled", "submit it again with Search to restart it");
  } catch (err) {
    showError(err.title, err.message);
  }
  setState("error");
}
