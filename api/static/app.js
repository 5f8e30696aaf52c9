// The Traincast web page: pick CNNs and machine types, submit a job, follow it, plot the result.
// Plain JS against the public HTTP API; every URL is relative so the page also works behind a path prefix.
"use strict";

(() => {
  const $ = (selector, root = document) => root.querySelector(selector);
  const POLL_DEFAULT_S = 2;
  const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                   "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
  const DASHES = ["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"];
  const SYMBOLS = ["circle", "square", "diamond", "triangle-up", "cross", "star"];
  const TIME_UNITS = [  // largest first: the first unit the longest time reaches twice is used
    { name: "days", short: "days", seconds: 86400 },
    { name: "hours", short: "h", seconds: 3600 },
    { name: "minutes", short: "min", seconds: 60 },
    { name: "seconds", short: "s", seconds: 1 },
  ];

  const state = {
    cnns: [],          // from GET /v1/cnns
    machines: [],      // from GET /v1/machines
    jobId: null,       // the job being followed
    generation: 0,     // bumped on each search so an older poll loop stops
    lastResult: null,
    lastRequest: null,
  };

  // ---- talking to the API -------------------------------------------------------------------

  class ApiError extends Error {
    constructor(title, detail, status) {
      super(detail);
      this.title = title;
      this.status = status;
    }
  }

  // Fetch JSON; a problem+json answer (RFC 9457) becomes an ApiError carrying its title and detail.
  async function api(method, path, body) {
    const init = { method, headers: { accept: "application/json" } };
    if (body instanceof FormData) {
      init.body = body;
    } else if (body !== undefined) {
      init.body = JSON.stringify(body);
      init.headers["content-type"] = "application/json";
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch (err) {
      throw new ApiError("Cannot reach the Traincast API", `the server did not answer (${err.message}); is it running?`, 0);
    }
    let data = null;
    try {
      data = await response.json();
    } catch (err) {
      data = null;
    }
    if (!response.ok) {
      const title = (data && data.title) || `The server answered ${response.status}`;
      const detail = (data && data.detail) || response.statusText || "no details were given";
      throw new ApiError(title, detail, response.status);
    }
    return { data, response };
  }

  // ---- formatting ----------------------------------------------------------------------------

  function timeUnit(maxSeconds) {
    return TIME_UNITS.find((u) => maxSeconds >= 2 * u.seconds) || TIME_UNITS[TIME_UNITS.length - 1];
  }

  function sig3(x) {
    if (x === 0) return "0";
    if (Math.abs(x) >= 100) return Math.round(x).toLocaleString("en-US");
    return Number(x.toPrecision(3)).toString();
  }

  function duration(seconds) {
    if (seconds == null) return "—";
    if (seconds < 1) return `${sig3(seconds * 1000)} ms`;
    const unit = timeUnit(seconds);
    return `${sig3(seconds / unit.seconds)} ${unit.short}`;
  }

  function money(usd) {
    if (usd == null) return "—";
    if (usd === 0) return "$0";
    if (usd >= 100) return "$" + Math.round(usd).toLocaleString("en-US");
    if (usd >= 0.1) return "$" + usd.toFixed(2);
    return "$" + Number(usd.toPrecision(2)).toString();
  }

  // Prices per hour keep the cents' fraction under $1 (AWS lists $0.526, not $0.53).
  function hourly(usd) {
    return "$" + usd.toFixed(usd < 1 ? 3 : 2);
  }

  function parameters(n) {
    if (n == null) return "";
    if (n >= 1e9) return `${sig3(n / 1e9)} B params`;
    if (n >= 1e6) return `${sig3(n / 1e6)} M params`;
    return `${sig3(n / 1e3)} k params`;
  }

  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else node.setAttribute(k, v);
    }
    for (const child of children) node.append(child);
    return node;
  }

  // API details name commands in `backticks`: show those as code, everything else as plain text.
  function richText(text) {
    const span = el("span");
    String(text).split(/(`[^`]*`)/).forEach((part) => {
      if (part.startsWith("`") && part.endsWith("`") && part.length > 1) span.append(el("code", { text: part.slice(1, -1) }));
      else span.append(part);
    });
    return span;
  }

  function capitalize(text) {
    return text ? text[0].toUpperCase() + text.slice(1) : text;
  }

  // ---- the searchable multi-select lists ----------------------------------------------------

  class Picker {
    constructor(root, describe) {
      this.root = root;
      this.describe = describe;   // item → {value, label, meta}
      this.items = [];
      this.selected = new Set();
      this.search = $(".picker-search", root);
      this.list = $(".picker-options", root);
      this.chips = $(".picker-selected", root);
      this.search.addEventListener("input", () => this.filter());
      // Enter in the filter ticks the first match instead of submitting the whole form.
      this.search.addEventListener("keydown", (event) => {
        if (event.key !== "Enter") return;
        event.preventDefault();
        const first = [...this.list.children].find((li) => !li.hidden);
        if (first) this.toggle(first.dataset.value, true);
        this.search.select();
      });
      this.onChange = () => {};
    }

    setItems(items) {
      this.items = items.map(this.describe);
      const known = new Set(this.items.map((i) => i.value));
      this.selected = new Set([...this.selected].filter((v) => known.has(v)));
      this.list.replaceChildren(...this.items.map((item) => {
        const box = el("input", { type: "checkbox", value: item.value });
        box.checked = this.selected.has(item.value);
        box.addEventListener("change", () => this.toggle(item.value, box.checked));
        const label = el("label", {}, box, el("span", { class: "name", text: item.label }),
                         el("span", { class: "meta", text: item.meta }));
        return el("li", { "data-value": item.value, "data-search": `${item.value} ${item.meta}`.toLowerCase() }, label);
      }));
      this.search.placeholder = `Search ${this.items.length} ${this.root.dataset.noun}s…`;
      this.filter();
      this.render();
    }

    filter() {
      const words = this.search.value.toLowerCase().split(/\s+/).filter(Boolean);
      for (const li of this.list.children) {
        li.hidden = !words.every((w) => li.dataset.search.includes(w));
      }
    }

    toggle(value, on) {
      if (on) this.selected.add(value);
      else this.selected.delete(value);
      const box = this.list.querySelector(`input[value="${CSS.escape(value)}"]`);
      if (box) box.checked = on;
      this.render();
      this.onChange();
    }

    set(values) {
      this.selected = new Set(values);
      for (const box of this.list.querySelectorAll("input")) box.checked = this.selected.has(box.value);
      this.render();
      this.onChange();
    }

    values() {
      // In list order, so plots and tables follow the catalog's order.
      return this.items.map((i) => i.value).filter((v) => this.selected.has(v));
    }

    render() {
      const values = this.values();
      if (!values.length) {
        this.chips.replaceChildren(el("span", { class: "none", text: `No ${this.root.dataset.noun} chosen` }));
        return;
      }
      const chips = values.map((v) => {
        const remove = el("button", { type: "button", class: "chip", title: `Remove ${v}`, "data-value": v }, `${v} ×`);
        remove.addEventListener("click", () => this.toggle(v, false));
        return remove;
      });
      const clear = el("button", { type: "button", class: "link", text: "clear" });
      clear.addEventListener("click", () => this.set([]));
      this.chips.replaceChildren(...chips, clear);
    }
  }

  const cnnPicker = new Picker($("#cnn-picker"), (c) => ({
    value: c.name,
    label: c.name,
    meta: [parameters(c.parameters), c.source !== "torchvision" ? `uploaded ${c.source}` : "",
           c.image_size ? `${c.image_size} px` : ""].filter(Boolean).join(" · "),
  }));
  const machinePicker = new Picker($("#machine-picker"), (m) => ({
    value: m.name,
    label: m.name,
    meta: [m.gpu ? `${m.gpu_count > 1 ? m.gpu_count + "× " : ""}${m.gpu}` : "no GPU (this machine)",
           m.price_usd_per_hour ? `${hourly(m.price_usd_per_hour)}/h` : "free"].join(" · "),
  }));

  // ---- messages -----------------------------------------------------------------------------

  function showError(title, detail) {
    const box = $("#error");
    box.replaceChildren(el("strong", { text: `${title}: ` }), richText(detail));
    box.hidden = false;
  }

  function clearMessages() {
    $("#error").hidden = true;
    $("#error").replaceChildren();
    $("#notes").replaceChildren();
    $("#progress").hidden = true;
  }

  function setState(name) {
    document.body.dataset.state = name;
    // A running job may wait long for an agent: a new search stays possible (it stops following the old one).
    $("#search").disabled = name === "submitting";
    $("#cancel").hidden = name !== "running";
  }

  // ---- the form -----------------------------------------------------------------------------

  class FormError extends Error {}

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

  function jobRequest() {
    const cnns = cnnPicker.values();
    const machines = machinePicker.values();
    if (!cnns.length) throw new FormError("choose at least one CNN");
    if (!machines.length) throw new FormError("choose at least one machine type");
    return {
      cnns, machines,
      batch_sizes: batchSizes(),
      epochs: whole("epochs", "Epochs"),
      dataset_size: whole("dataset-size", "The dataset size"),
      image_size: whole("image-size", "The image size"),
      optimizer: $("#optimizer").value,
    };
  }

  // Put a job's request back into the form (a page opened with ?job=<id>).
  function fillForm(request) {
    cnnPicker.set(request.cnns || []);
    machinePicker.set(request.machines || []);
    for (const [id, key] of [["epochs", "epochs"], ["dataset-size", "dataset_size"], ["image-size", "image_size"]]) {
      if (request[key] != null) $(`#${id}`).value = request[key];
    }
    if (request.optimizer) $("#optimizer").value = request.optimizer;
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

  function syncBatchMode() {
    const range = $('input[name="batch-mode"]:checked').value === "range";
    $("#batch-list").hidden = range;
    $("#batch-range").hidden = !range;
  }

  async function search(event) {
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

  // ---- following a job ----------------------------------------------------------------------

  async function follow(jobId, request) {
    const generation = ++state.generation;
    state.jobId = jobId;
    history.replaceState(null, "", `?job=${encodeURIComponent(jobId)}`);
    setState("running");
    showProgress({ status: "queued", progress: null }, null);
    let failures = 0;
    while (generation === state.generation) {
      let job, response;
      try {
        ({ data: job, response } = await api("GET", `v1/jobs/${encodeURIComponent(jobId)}`));
        failures = 0;
        $("#error").hidden = true;
      } catch (err) {
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
      // The API says when to ask again (Retry-After); stay within 0.5-10 s whatever it says.
      const after = Number(response.headers.get("retry-after"));
      const waitS = Math.min(10, Math.max(0.5, Number.isFinite(after) && after > 0 ? after : POLL_DEFAULT_S));
      await new Promise((resolve) => setTimeout(resolve, waitS * 1000));
    }
  }

  // Machine types with pending layer benchmarks and no live agent; null when /v1/agents cannot tell.
  async function waitingMachines(job) {
    const perMachine = (job.progress && job.progress.machines) || {};
    const pending = Object.keys(perMachine).filter((m) => perMachine[m].pending > 0);
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

  function showProgress(job, agents) {
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
      if (p.pending > 0 && agents && agents.waiting.has(machine)) {
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

  async function cancel() {
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

  // ---- plots and tables ---------------------------------------------------------------------

  function note(content, kind = "info") {
    $("#notes").append(el("li", { class: kind }, typeof content === "string" ? richText(content) : content));
  }

  function machineSpec(name) {
    return state.machines.find((m) => m.name === name);
  }

  // Colour by whichever of CNN and machine has more members; the other gets dashes and marker shapes.
  function styles(cnns, machines) {
    const byCnn = cnns.length >= machines.length;
    return (cnn, machine) => {
      const ci = cnns.indexOf(cnn);
      const mi = machines.indexOf(machine);
      const [colour, shape] = byCnn ? [ci, mi] : [mi, ci];
      return { color: PALETTE[colour % PALETTE.length], dash: DASHES[shape % DASHES.length],
               symbol: SYMBOLS[shape % SYMBOLS.length] };
    };
  }

  function baseLayout(title, xTitle, yTitle) {
    return {
      title: { text: title, x: 0.01, xanchor: "left", font: { size: 15 } },
      font: { family: "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif", size: 13, color: "#1d2733" },
      margin: { l: 72, r: 16, t: 44, b: 56 },
      xaxis: { title: { text: xTitle, font: { size: 13 } }, zeroline: false, gridcolor: "#e6e9ee", automargin: true },
      yaxis: { title: { text: yTitle, font: { size: 13 } }, zeroline: false, gridcolor: "#e6e9ee", automargin: true,
               rangemode: "tozero" },
      showlegend: false,  // one HTML legend serves both plots (renderLegend)
      hoverlabel: { font: { size: 13 } },
      paper_bgcolor: "#ffffff",
      plot_bgcolor: "#ffffff",
    };
  }

  const PLOT_CONFIG = { responsive: true, displaylogo: false, modeBarButtonsToRemove: ["select2d", "lasso2d"] };

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

  function render(result, request) {
    state.lastResult = result;
    state.lastRequest = request;
    const predictions = result.predictions || [];
    // In the order the request named them (the order of the chips), so colours and legends follow the form.
    const cnns = inOrder((request && request.cnns) || [], predictions.map((p) => p.cnn));
    const machines = inOrder((request && request.machines) || [], predictions.map((p) => p.machine));
    const style = styles(cnns, machines);
    explainGaps(result, cnns, machines);

    const plotted = predictions.filter((p) => p.total_seconds != null);
    const bestTimes = (result.best || []).filter((b) => b.min_time).map((b) => b.min_time.total_seconds);
    const bandTops = plotted.map((p) => p.total_seconds_p90).filter((v) => typeof v === "number");
    const unit = timeUnit(Math.max(0, ...plotted.map((p) => p.total_seconds), ...bestTimes, ...bandTops));

    const lineTraces = [];
    const pointTraces = [];
    const legend = [];
    for (const cnn of cnns) {
      for (const machine of machines) {
        const name = `${cnn} · ${machine}`;
        // Overlapping bands add up: fainter ones when there are many lines.
        const s = { ...style(cnn, machine), bandAlpha: cnns.length * machines.length > 3 ? 0.1 : 0.18 };
        const points = plotted.filter((p) => p.cnn === cnn && p.machine === machine)
                              .sort((a, b) => a.batch_size - b.batch_size);
        if (points.length) lineTraces.push(...timeTraces(name, cnn, machine, points, unit, s));
        const best = (result.best || []).find((b) => b.cnn === cnn && b.machine === machine);
        if (best && best.min_time) pointTraces.push(costTrace(name, cnn, machine, best, unit, s));
        if (points.length) legend.push({ name, cnn, machine, style: s });
      }
    }

    const hasPlots = lineTraces.length > 0;
    $("#plots-placeholder").hidden = hasPlots;
    $("#plots-placeholder").textContent = hasPlots ? "" : "Nothing to plot: see the notes above.";
    $("#plots").classList.toggle("has-plots", hasPlots);
    if (hasPlots) {
      const requested = [...new Set(predictions.map((p) => p.batch_size))].sort((a, b) => a - b);
      const right = baseLayout("Training time vs mini-batch size", "Mini-batch size (images)",
                               `Predicted training time (${unit.name})`);
      Object.assign(right.xaxis, batchAxis(requested));
      const lows = plotted.map((p) => (typeof p.total_seconds_p10 === "number" ? p.total_seconds_p10 : p.total_seconds));
      const highs = plotted.map((p) => (typeof p.total_seconds_p90 === "number" ? p.total_seconds_p90 : p.total_seconds));
      logIfSpread(right.yaxis, lows.map((v) => v / unit.seconds), highs.map((v) => v / unit.seconds));
      const left = baseLayout("Fastest batch size: training time vs cost", `Minimum training time (${unit.name})`,
                              "Cost of the training run (US$)");
      Object.assign(left.xaxis, { rangemode: "tozero" });
      const xs = pointTraces.map((t) => t.x[0]);
      logIfSpread(left.xaxis, xs, xs);
      Object.assign(left.yaxis, { tickprefix: "$", separatethousands: true });
      if (pointTraces.every((t) => t.y[0] === 0)) {
        // All free (the local machine): keep $0 on the axis instead of an empty autoscaled band around it.
        Object.assign(left.yaxis, { range: [-0.05, 1], tickvals: [0], ticktext: ["$0"] });
      }
      Plotly.react("plot-batch", lineTraces, right, PLOT_CONFIG);
      Plotly.react("plot-cost", pointTraces, left, PLOT_CONFIG);
    } else {
      Plotly.purge("plot-batch");
      Plotly.purge("plot-cost");
    }
    renderLegend(hasPlots ? legend : []);
    renderBest(result, cnns, machines);
    renderMachines();
  }

  // Values a factor of 30 or more apart: a linear axis would flatten the small ones onto zero, so use a log axis.
  function logIfSpread(axis, lows, highs) {
    const lo = Math.min(...lows);
    const hi = Math.max(...highs);
    if (!(lo > 0) || hi / lo < 30) return;
    const ticks = logTicks(lo, hi);
    Object.assign(axis, { type: "log", tickmode: "array", tickvals: ticks, ticktext: ticks.map(sig3) });
    axis.title.text = axis.title.text.replace(/\)$/, ", log scale)");
  }

  // One legend for both plots, under them: click an entry to hide or show that CNN × machine in both.
  function renderLegend(entries) {
    const box = $("#legend");
    box.hidden = entries.length === 0;
    box.replaceChildren(...entries.map((entry) => {
      const button = el("button", { type: "button", class: "legend-item", "aria-pressed": "true",
                                    "data-cnn": entry.cnn, "data-machine": entry.machine,
                                    title: "Hide or show in both plots" });
      button.append(swatch(entry.style), el("span", { text: entry.name }));
      button.addEventListener("click", () => {
        const shown = button.getAttribute("aria-pressed") !== "true";
        button.setAttribute("aria-pressed", String(shown));
        for (const id of ["plot-batch", "plot-cost"]) {
          const indices = [];
          document.getElementById(id).data.forEach((t, i) => {
            if (t.meta && t.meta.cnn === entry.cnn && t.meta.machine === entry.machine) indices.push(i);
          });
          if (indices.length) Plotly.restyle(id, { visible: shown }, indices);
        }
      });
      return button;
    }));
  }

  const DASH_ARRAYS = { solid: "", dash: "6 3", dot: "2 2", dashdot: "6 2 2 2", longdash: "10 3",
                        longdashdot: "10 2 2 2" };
  const SYMBOL_PATHS = {
    circle: "M21 7a4 4 0 1 1-8 0a4 4 0 1 1 8 0Z",
    square: "M13.5 3.5h7v7h-7Z",
    diamond: "M17 2.5l4.5 4.5-4.5 4.5-4.5-4.5Z",
    "triangle-up": "M17 2.5l4.5 8h-9Z",
    cross: "M15.5 2.5h3v3h3v3h-3v3h-3v-3h-3v-3h3Z",
    star: "M17 2l1.3 3.2 3.4.2-2.6 2.2.9 3.4-3-1.9-3 1.9.9-3.4-2.6-2.2 3.4-.2Z",
  };

  // A short line in the trace's colour and dash with its marker; built by the HTML parser, which puts <svg> in
  // the SVG namespace itself. Every value comes from the constants above.
  function swatch(style) {
    const holder = document.createElement("span");
    holder.className = "swatch";
    holder.innerHTML = `<svg width="34" height="14" aria-hidden="true">`
      + `<line x1="1" y1="7" x2="33" y2="7" stroke="${style.color}" stroke-width="2.5"`
      + ` stroke-dasharray="${DASH_ARRAYS[style.dash]}"></line>`
      + `<path d="${SYMBOL_PATHS[style.symbol]}" fill="${style.color}"></path></svg>`;
    return holder;
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

  function inOrder(wanted, present) {
    const seen = new Set(present);
    return [...new Set([...wanted.filter((v) => seen.has(v)), ...present])];
  }

  function timeTraces(name, cnn, machine, points, unit, s) {
    const traces = [];
    const banded = points.filter((p) => typeof p.total_seconds_p10 === "number" && typeof p.total_seconds_p90 === "number");
    if (banded.length) {
      // The prediction interval: the upper edge, then the lower edge filled up to it.
      const common = { type: "scatter", mode: "lines", line: { width: 0, color: s.color }, legendgroup: name,
                       showlegend: false, hoverinfo: "skip", meta: { role: "band", cnn, machine } };
      traces.push({ ...common, name: `${name} p90`, x: banded.map((p) => p.batch_size),
                    y: banded.map((p) => p.total_seconds_p90 / unit.seconds) });
      traces.push({ ...common, name: `${name} p10`, x: banded.map((p) => p.batch_size),
                    y: banded.map((p) => p.total_seconds_p10 / unit.seconds), fill: "tonexty",
                    fillcolor: hexToRgba(s.color, s.bandAlpha) });
    }
    const text = points.map((p) => {
      let t = `<b>${cnn}</b> on ${machine}<br>batch size ${p.batch_size}<br>training time ${duration(p.total_seconds)}`;
      if (typeof p.total_seconds_p10 === "number" && typeof p.total_seconds_p90 === "number") {
        t += ` (80% interval ${duration(p.total_seconds_p10)}–${duration(p.total_seconds_p90)})`;
      }
      return `${t}<br>cost ${money(p.cost_usd)}<br>one iteration ${duration(p.iteration_seconds)}`;
    });
    traces.push({
      type: "scatter", mode: points.length > 40 ? "lines" : "lines+markers", name, legendgroup: name,
      x: points.map((p) => p.batch_size), y: points.map((p) => p.total_seconds / unit.seconds),
      line: { color: s.color, dash: s.dash, width: 2.5 }, marker: { symbol: s.symbol, size: 7 },
      text, hovertemplate: "%{text}<extra></extra>", meta: { role: "line", cnn, machine },
    });
    return traces;
  }

  function costTrace(name, cnn, machine, best, unit, s) {
    const t = best.min_time;
    let text = `<b>${cnn}</b> on ${machine}<br>fastest at batch size ${t.batch_size}<br>`
      + `training time ${duration(t.total_seconds)}<br>cost ${money(t.cost_usd)}`;
    const c = best.min_cost;
    if (c && c.batch_size !== t.batch_size) text += `<br>cheapest at batch size ${c.batch_size}: ${money(c.cost_usd)}`;
    return {
      type: "scatter", mode: "markers", name, x: [t.total_seconds / unit.seconds], y: [t.cost_usd],
      marker: { color: s.color, symbol: s.symbol, size: 13, line: { color: "#ffffff", width: 1.5 } },
      text: [text], hovertemplate: "%{text}<extra></extra>", meta: { role: "point", cnn, machine },
    };
  }

  function hexToRgba(hex, alpha) {
    const n = parseInt(hex.slice(1), 16);
    return `rgba(${(n >> 16) & 255}, ${(n >> 8) & 255}, ${n & 255}, ${alpha})`;
  }

  // Say why a CNN × machine × batch size has no point: no model for the machine, or out of memory.
  function explainGaps(result, cnns, machines) {
    const models = result.models || {};
    for (const machine of machines) {
      const model = models[machine];
      if (model && model.status !== "ok") {
        note(`${capitalize(model.detail || `no predictor model for ${machine}`)}. Its times are not plotted.`, "warning");
      }
    }
    const predictions = result.predictions || [];
    for (const cnn of cnns) {
      for (const machine of machines) {
        if (models[machine] && models[machine].status !== "ok") continue;
        const mine = predictions.filter((p) => p.cnn === cnn && p.machine === machine);
        const oom = mine.filter((p) => !p.fits_in_memory).map((p) => p.batch_size);
        if (oom.length) {
          const spec = machineSpec(machine);
          const memory = spec && spec.gpu ? "GPU memory" : "memory";
          note(`${cnn} on ${machine} does not fit in ${memory} at batch size${oom.length > 1 ? "s" : ""} `
            + `${oom.join(", ")}: not plotted.`, "warning");
        }
        const other = mine.filter((p) => p.fits_in_memory && p.total_seconds == null).map((p) => p.batch_size);
        if (other.length) note(`${cnn} on ${machine} has no prediction at batch sizes ${other.join(", ")}.`, "warning");
      }
    }
    const free = machines.filter((m) => { const s = machineSpec(m); return s && !s.price_usd_per_hour; });
    if (free.length) note(`${free.join(", ")} ${free.length > 1 ? "have" : "has"} no hourly price, so ${free.length > 1 ? "their" : "its"} cost is $0.`);
    const fitted = machines.filter((m) => models[m] && models[m].status === "ok").map((m) => {
      const model = models[m];
      const error = typeof model.loco_mape === "number" ? `, leave-one-CNN-out error ${sig3(model.loco_mape)}%` : "";
      return `${m} v${model.version} (${model.kind}${error})`;
    });
    if (fitted.length) note(`Predictor model${fitted.length > 1 ? "s" : ""}: ${fitted.join("; ")}.`);
  }

  function renderBest(result, cnns, machines) {
    const rows = (result.best || []).slice().sort((a, b) =>
      cnns.indexOf(a.cnn) - cnns.indexOf(b.cnn) || machines.indexOf(a.machine) - machines.indexOf(b.machine));
    const head = el("tr", {}, ...["CNN", "Machine", "Fastest batch size", "Time", "Cost",
                                   "Cheapest batch size", "Time", "Cost"]
      .map((h, i) => el("th", { text: h, class: i >= 2 ? "num" : "" })));
    const cells = (pick) => pick
      ? [el("td", { class: "num", text: String(pick.batch_size) }), el("td", { class: "num", text: duration(pick.total_seconds) }),
         el("td", { class: "num", text: money(pick.cost_usd) })]
      : [el("td", { colspan: "3", class: "muted", text: "no prediction" })];
    const body = rows.map((b) => el("tr", {}, el("td", { text: b.cnn }), el("td", { text: b.machine }),
                                    ...cells(b.min_time), ...cells(b.min_cost)));
    $("#best-table").replaceChildren(el("thead", {}, head), el("tbody", {}, ...body));
    $("#best").hidden = rows.length === 0;
  }

  function renderMachines() {
    const chosen = new Set(machinePicker.values());
    const head = el("tr", {}, ...["Machine type", "GPU", "GPUs", "GPU memory (total)", "vCPUs", "RAM", "Price per hour"]
      .map((h, i) => el("th", { text: h, class: i >= 2 ? "num" : "" })));
    const num = (v, suffix = "") => el("td", { class: "num", text: v == null ? "—" : `${sig3(v)}${suffix}` });
    const body = state.machines.map((m) => el("tr", { class: chosen.has(m.name) ? "chosen" : "", "data-machine": m.name },
      el("td", { text: m.name }),
      el("td", { text: m.gpu || (m.provider === "local" ? "none (the agent's own CPU or GPU)" : "none") }),
      num(m.gpu_count),
      num(m.gpu_memory_gib, " GiB"),
      num(m.vcpus),
      num(m.memory_gib, " GiB"),
      el("td", { class: "num", text: m.price_usd_per_hour ? hourly(m.price_usd_per_hour) : "$0 (free)" })));
    $("#machine-table").replaceChildren(el("thead", {}, head), el("tbody", {}, ...body));
  }

  // ---- uploading a CNN ----------------------------------------------------------------------

  async function upload(event) {
    event.preventDefault();
    const message = $("#upload-message");
    message.className = "";
    const name = $("#upload-name").value.trim();
    const file = $("#upload-file").files[0];
    if (!name || !file) {
      message.className = "error";
      message.textContent = !name ? "Give the CNN a name." : "Choose an ONNX or JSON file.";
      return;
    }
    const form = new FormData();
    form.append("name", name);
    form.append("file", file, file.name);
    $("#upload-button").disabled = true;
    message.textContent = `Uploading ${file.name}…`;
    try {
      const { data } = await api("POST", "v1/cnns", form);
      await loadCnns();
      cnnPicker.toggle(data.name, true);
      message.className = "ok";
      message.textContent = `Registered ${data.name} (${data.source}${data.parameters ? ", " + parameters(data.parameters) : ""}); `
        + "it is now chosen in the CNN list.";
    } catch (err) {
      message.className = "error";
      message.replaceChildren(el("strong", { text: `${err.title}: ` }), richText(err.message));
    } finally {
      $("#upload-button").disabled = false;
    }
  }

  // ---- start --------------------------------------------------------------------------------

  async function loadCnns() {
    const { data } = await api("GET", "v1/cnns");
    state.cnns = data.cnns;
    cnnPicker.setItems(state.cnns);
  }

  async function loadMachines() {
    const { data } = await api("GET", "v1/machines");
    state.machines = data.machines;
    machinePicker.setItems(state.machines);
    renderMachines();
  }

  async function start() {
    $("#search-form").addEventListener("submit", search);
    $("#cancel").addEventListener("click", cancel);
    $("#upload-form").addEventListener("submit", upload);
    for (const radio of document.querySelectorAll('input[name="batch-mode"]')) radio.addEventListener("change", syncBatchMode);
    machinePicker.onChange = renderMachines;
    if (typeof Plotly === "undefined") {
      showError("The plotting library did not load", "static/plotly.min.js could not be fetched from the server");
    }
    try {
      await Promise.all([loadCnns(), loadMachines()]);
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
  window.traincast = { state, render, cnnPicker, machinePicker };
  start();
})();
