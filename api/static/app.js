// The Traincast web page: pick CNNs and machine types, submit a job, follow it, plot the result.
// Plain JS against the public HTTP API; every URL is relative so the page also works behind a path prefix.
"use strict";

(() => {
  const $ = (selector, root = document) => root.querySelector(selector);
  const POLL_DEFAULT_S = 2;
  const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                   "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
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

  // ---- the API key: asked for once, kept in this browser, sent with every call ----------------

  const KEY_STORAGE = "traincast.apiKey";
  let memoryKey = "";  // when localStorage is unavailable (some private modes): kept for this page only
  let keyWaiter = null;  // resolves the promise keyEntered() returned

  function apiKey() {
    try {
      return localStorage.getItem(KEY_STORAGE) || memoryKey;
    } catch (err) {
      return memoryKey;
    }
  }

  function showKeyForm(message) {
    const box = $("#key-message");
    box.textContent = message || "";
    box.hidden = !message;
    $("#key-form").hidden = false;
    $("#api-key").value = "";
    $("#api-key").focus();
  }

  // Show the prompt and wait until a key is entered.
  function keyEntered(message) {
    showKeyForm(message);
    setState("key");
    return new Promise((resolve) => { keyWaiter = resolve; });
  }

  function saveKey(event) {
    event.preventDefault();
    const key = $("#api-key").value.trim();
    if (!key) {
      showKeyForm("Paste an API key first.");
      return;
    }
    memoryKey = key;
    try {
      localStorage.setItem(KEY_STORAGE, key);
    } catch (err) {
      // memoryKey holds it until the page is closed
    }
    $("#key-form").hidden = true;
    if (keyWaiter) {
      const resolve = keyWaiter;
      keyWaiter = null;
      resolve();
    } else {
      loadLists().catch((err) => showError(err.title || "Could not load the lists", err.message));
    }
  }

  // Fetch JSON; a problem+json answer (RFC 9457) becomes an ApiError carrying its title and detail.
  async function api(method, path, body) {
    const init = { method, headers: { accept: "application/json" } };
    const key = apiKey();
    if (key) init.headers.authorization = `Bearer ${key}`;
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
      let title = (data && data.title) || `The server answered ${response.status}`;
      const detail = (data && data.detail) || response.statusText || "no details were given";
      if (response.status === 401) {
        title = "The API key was refused";
        showKeyForm(`${title}: ${detail}. Enter a valid key.`);
      } else if (response.status === 403) {
        title = "This API key may not do that";
      } else if (response.status === 429) {
        title = "Too many requests with this API key";
      }
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
      this.describe = describe;   // item → {value, label, meta, group?, search?}
      this.items = [];
      this.selected = new Set();
      this.search = $(".picker-search", root);
      this.list = $(".picker-options", root);
      this.chips = $(".picker-selected", root);
      this.chooseShown = $(".picker-all", root);
      this.search.addEventListener("input", () => this.filter());
      // Enter in the filter ticks the first match instead of submitting the whole form.
      this.search.addEventListener("keydown", (event) => {
        if (event.key !== "Enter") return;
        event.preventDefault();
        const first = this.options().find((li) => !li.hidden);
        if (first) this.toggle(first.dataset.value, true);
        this.search.select();
      });
      // "T4" in the filter, then one click: every T4 machine type of every cloud.
      if (this.chooseShown) {
        this.chooseShown.addEventListener("click", () => {
          this.add(this.options().filter((li) => !li.hidden).map((li) => li.dataset.value));
        });
      }
      this.onChange = () => {};
    }

    options() {
      return [...this.list.querySelectorAll("li[data-value]")];
    }

    setItems(items) {
      this.items = items.map(this.describe);
      const known = new Set(this.items.map((i) => i.value));
      this.selected = new Set([...this.selected].filter((v) => known.has(v)));
      const rows = [];
      let group = null;
      for (const item of this.items) {
        // A heading row where the group changes (the API lists machine types provider by provider).
        if (item.group && item.group !== group) {
          group = item.group;
          rows.push(el("li", { class: "group", role: "presentation", "data-group": group, text: group }));
        }
        const box = el("input", { type: "checkbox", value: item.value });
        box.checked = this.selected.has(item.value);
        box.addEventListener("change", () => this.toggle(item.value, box.checked));
        const label = el("label", { title: item.title || "" }, box, el("span", { class: "name", text: item.label }),
                         el("span", { class: "meta", text: item.meta }));
        rows.push(el("li", { "data-value": item.value, "data-group": item.group || "",
                             "data-search": (item.search || `${item.value} ${item.meta}`).toLowerCase() }, label));
      }
      this.list.replaceChildren(...rows);
      this.search.placeholder = `Search ${this.items.length} ${this.root.dataset.noun}s…`;
      this.filter();
      this.render();
    }

    filter() {
      const words = this.search.value.toLowerCase().split(/\s+/).filter(Boolean);
      const shownGroups = new Set();
      let shown = 0;
      for (const li of this.options()) {
        li.hidden = !words.every((w) => li.dataset.search.includes(w));
        if (!li.hidden) {
          shown++;
          shownGroups.add(li.dataset.group);
        }
      }
      for (const heading of this.list.querySelectorAll("li.group")) heading.hidden = !shownGroups.has(heading.dataset.group);
      if (this.chooseShown) {
        this.chooseShown.hidden = !words.length || shown < 2;
        this.chooseShown.textContent = `choose all ${shown} shown`;
      }
    }

    add(values) {
      for (const v of values) this.selected.add(v);
      for (const box of this.list.querySelectorAll("input")) box.checked = this.selected.has(box.value);
      this.render();
      this.onChange();
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
      const count = el("span", { class: "count", text: `${values.length} chosen:` });
      this.chips.replaceChildren(count, ...chips, clear);
    }
  }

  const cnnPicker = new Picker($("#cnn-picker"), (c) => ({
    value: c.name,
    label: c.name,
    meta: [parameters(c.parameters), c.source !== "torchvision" ? `uploaded ${c.source}` : "",
           c.image_size ? `${c.image_size} px` : ""].filter(Boolean).join(" · "),
  }));
  const PROVIDERS = { aws: "AWS", gcp: "Google Cloud", azure: "Azure", local: "This machine", own: "Your own" };
  // Words a person may type for a provider: "google" finds gcp, "microsoft" finds azure.
  const PROVIDER_WORDS = { aws: "aws amazon ec2", gcp: "gcp google cloud gce", azure: "azure microsoft",
                           local: "local this machine", own: "own registered mine" };

  function providerName(m) {
    const provider = m.provider || "";
    if (PROVIDERS[provider]) return PROVIDERS[provider];
    return m.registered ? `${provider} (registered)` : provider || "other";
  }

  function gpuText(m) {
    if (!m.gpu) return m.provider === "local" ? "no GPU (this machine)" : "no GPU";
    return `${m.gpu_count > 1 ? m.gpu_count + "× " : ""}${m.gpu}`;
  }

  const machinePicker = new Picker($("#machine-picker"), (m) => ({
    value: m.name,
    label: m.name,
    group: providerName(m),
    meta: [gpuText(m), m.price_usd_per_hour ? `${hourly(m.price_usd_per_hour)}/h` : "free"].join(" · "),
    search: [m.name, m.provider, PROVIDER_WORDS[m.provider] || (m.registered ? "own registered" : ""),
             providerName(m), m.gpu || "no gpu cpu", m.gpu_count > 1 ? `${m.gpu_count}x multi-gpu` : "",
             m.region || ""].join(" "),
    title: [providerName(m), m.region, m.gpu ? `${gpuText(m)}, ${sig3(m.gpu_memory_gib || 0)} GiB GPU memory in all` : "",
            m.price_usd_per_hour ? `${hourly(m.price_usd_per_hour)}/h on demand` : "",
            m.spot_price_usd_per_hour ? `${hourly(m.spot_price_usd_per_hour)}/h spot` : ""].filter(Boolean).join(" · "),
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
      ...trainingSettings(),
      ...layoutSettings(),
      ...inputSettings(),
      // Unticked (the default): GPU types with no benchmarks of their own are answered at once by the reference.
      wait_for_benchmarks: $("#wait-benchmarks").checked,
    };
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
    return out;
  }

  // How images arrive (issue 26): omitted for images in memory, as before.
  function inputSettings() {
    const source = $("#input-source").value;
    const gbps = $("#network-gbps").value.trim();
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

  // How the CNN is trained: optimizer (momentum is SGD's only), precision and memory layout.
  function trainingSettings() {
    const optimizer = $("#optimizer").value;
    const settings = { optimizer, precision: $("#precision").value, channels_last: $("#channels-last").checked };
    // Empty weight decay: the optimizer's PyTorch default, which the API fills in and echoes.
    if ($("#weight-decay").value.trim() !== "") settings.weight_decay = decimal("weight-decay", "Weight decay");
    if (optimizer === "sgd") settings.momentum = decimal("momentum", "Momentum");
    return settings;
  }

  function syncOptimizer() {
    const sgd = $("#optimizer").value === "sgd";
    $("#momentum").disabled = !sgd;
    $("#momentum").title = sgd ? "torch.optim.SGD's momentum; 0 is PyTorch's default" : "momentum is SGD's; Adam and AdamW have their own betas";
  }

  // Put a job's request back into the form (a page opened with ?job=<id>).
  function fillForm(request) {
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
    syncOptimizer();
    $("#wait-benchmarks").checked = Boolean(request.wait_for_benchmarks);
    const spec = request.input || {};
    $("#input-source").value = spec.source || "memory";
    $("#network-gbps").value = spec.network_gbps ?? "";
    $("#dataloader-workers").value = spec.dataloader_workers ?? "";
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
  async function waitingMachines(job) {
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

  function note(content, kind = "info", id = "") {
    const li = el("li", { class: kind }, typeof content === "string" ? richText(content) : content);
    if (id) li.id = id;
    $("#notes").append(li);
    return li;
  }

  // By name; rebuilt when the list is loaded again (hover text asks once per point).
  function machineSpec(name) {
    if (state.machineIndex === undefined || state.machineIndex.list !== state.machines) {
      state.machineIndex = { list: state.machines, byName: new Map(state.machines.map((m) => [m.name, m])) };
    }
    return state.machineIndex.byName.get(name);
  }

  // Large arrays: Math.max(...values) would pass tens of thousands of arguments.
  function extremes(values) {
    let lo = Infinity;
    let hi = -Infinity;
    for (const v of values) {
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
    return [lo, hi];
  }

  // Ten distinct colours, then evenly spaced hues when more are needed (sixty machine types).
  function colour(i, n) {
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
  function styles(cnns, machines) {
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

  function sourceStyle(source) {
    return SOURCES[source] || SOURCES.benchmarked;
  }

  function markerSymbol(symbol, source) {
    return sourceStyle(source).open ? `${symbol}-open` : symbol;
  }

  // What a point's numbers rest on, for hover labels and the tables.
  function sourceText(p, machine, models) {
    if (p.source === "reference") {
      const model = models[machine] || {};
      const pct = typeof p.reference_error_pct === "number" ? p.reference_error_pct : model.whole_step_mape;
      let text = typeof pct === "number" ? `reference (±${sig3(pct)}% held-out error)` : "reference";
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

  function baseLayout(title, xTitle, yTitle) {
    return {
      title: { text: title, x: 0.01, xanchor: "left", font: { size: 15 } },
      font: { family: "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif", size: 13, color: "#1d2733" },
      margin: { l: 72, r: 16, t: 44, b: 56 },
      xaxis: { title: { text: xTitle, font: { size: 13 } }, zeroline: false, gridcolor: "#e6e9ee", automargin: true },
      yaxis: { title: { text: yTitle, font: { size: 13 } }, zeroline: false, gridcolor: "#e6e9ee", automargin: true,
               rangemode: "tozero" },
      // Each plot's own legend, beside it (issue 27): clicking an entry hides or shows that CNN × machine type in
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

  // "8 GPUs × 4 machines": a point's data-parallel layout.
  function layoutOf(p) {
    const gpus = p.gpus_used || 1;
    const nodes = p.nodes || 1;
    return `${gpus} GPU${gpus === 1 ? "" : "s"}` + (nodes > 1 ? ` × ${nodes} machines` : "");
  }

  // Predictions by "cnn\u0000machine", each list sorted by batch size: one pass over tens of thousands of points.
  function byPair(predictions) {
    const groups = new Map();
    for (const p of predictions) {
      const key = `${p.cnn}\u0000${p.machine}`;
      if (!groups.has(key)) groups.set(key, []);
      groups.get(key).push(p);
    }
    for (const list of groups.values()) list.sort((a, b) => a.batch_size - b.batch_size);
    return groups;
  }

  function render(result, request) {
    state.lastResult = result;
    state.lastRequest = request;
    const predictions = result.predictions || [];
    const models = result.models || {};
    // In the order the request named them (the order of the chips), so colours and legends follow the form.
    const cnns = inOrder((request && request.cnns) || [], [...new Set(predictions.map((p) => p.cnn))]);
    const machines = inOrder((request && request.machines) || [], [...new Set(predictions.map((p) => p.machine))]);
    const style = styles(cnns, machines);
    const pairs = byPair(predictions);
    $("#notes").replaceChildren();  // drawn again from this result (render may run twice for one job)
    explainGaps(result, cnns, machines, pairs);

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
          // One line per source (normally a CNN × machine has one): the dash says which. Data parallel (issue 26):
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
      const right = baseLayout("Training time vs mini-batch size", "Mini-batch size (images)",
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
    const memory = hasPlots ? memoryTraces(cnns, machines, pairs) : [];
    $("#plot-memory").hidden = memory.length === 0;
    if (memory.length) {
      const layout = baseLayout("Peak memory vs mini-batch size (dotted: each GPU's memory)", "Mini-batch size (images)",
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
    renderBest(result, cnns, machines, pairs);
    renderMachines();
  }

  // Data parallel (issue 26): per CNN × machine × node count, its fastest training time against the GPUs it uses
  // (GPUs per machine × machines), drawn only when a result compares GPU or node counts.
  function gpuTraces(cnns, machines, pairs, style, drawable, unit) {
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
            + `${money(p.cost_usd)}, scaling efficiency ${Math.round((p.scaling_efficiency ?? 1) * 100)}%`),
          hovertemplate: "%{text}<extra></extra>",
        });
      }
    }
    return traces;
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

  // The key to the line styles: which numbers were measured and which come from the reference predictor.
  function renderSourceKey(sources, result) {
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
      entries.push(["reference", "reference: learnt from public measurements of other GPUs"
        + (typeof mape === "number" ? ` (±${sig3(mape)}% held-out error)` : "")]);
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
  function syncLegends() {
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

  // Two machine types with equal predictions (the same GPU answered by the reference) would draw one line over the
  // other: each later twin gets its own dash, smaller markers on the cost plot, and every twin names the others.
  const TWIN_DASHES = ["dot", "dashdot", "longdashdot", "longdash"];

  function separateTwins(lineTraces, pointTraces) {
    const curve = (t) => `${t.x.join(",")}|${t.y.map((v) => Number(v).toPrecision(6)).join(",")}`;
    const groups = new Map();
    for (const t of lineTraces) {
      if (t.meta.role !== "line") continue;
      const key = curve(t);
      if (!groups.has(key)) groups.set(key, []);
      groups.get(key).push(t);
    }
    for (const twins of groups.values()) {
      const machines = [...new Set(twins.map((t) => t.meta.machine))];
      if (machines.length < 2) continue;
      twins.forEach((t, k) => {
        const others = twins.filter((o) => o !== t).map((o) => o.name);
        t.meta.twins = others;
        if (k > 0) t.line = { ...t.line, dash: TWIN_DASHES[(k - 1) % TWIN_DASHES.length], width: 3 };
        t.text = t.text.map((text) => `${text}<br>same prediction as ${others.join(", ")}: the lines coincide`);
      });
      const cnns = [...new Set(twins.map((t) => t.meta.cnn))];
      note(`${joinAnd(machines)} have equal predicted times for ${joinAnd(cnns)}: their lines coincide, drawn with `
        + "different dashes.", "info", "");
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

  function joinAnd(names) {
    return names.length < 2 ? names.join("") : `${names.slice(0, -1).join(", ")} and ${names[names.length - 1]}`;
  }

  // A cost point's label: what tells it apart from the others.
  function pointLabel(cnn, machine, cnns, machines) {
    if (cnns.length === 1) return machine;
    if (machines.length === 1) return cnn;
    return `${cnn} · ${machine}`;
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

  // The machine type's provider, GPU and price, for hover labels.
  function machineLine(machine) {
    const m = machineSpec(machine);
    if (!m) return machine;
    const price = m.price_usd_per_hour ? `${hourly(m.price_usd_per_hour)}/h` : "free";
    return `${machine} (${providerName(m)}, ${gpuText(m)}, ${price})`;
  }

  // Training on one GPU of a machine with several: say so and give the per-GPU share of the cost.
  function gpuShare(p, machine) {
    const m = machineSpec(machine);
    if (!m || !(m.gpu_count > 1)) return "";
    const used = p.gpus_used || 1;
    const nodes = p.nodes > 1 ? ` on each of ${p.nodes} machines` : "";
    const scaling = used * (p.nodes || 1) > 1 && typeof p.scaling_efficiency === "number"
      ? `; global batch ${p.global_batch_size}, scaling efficiency ${Math.round(p.scaling_efficiency * 100)}%` : "";
    return `<br>on ${used} of its ${m.gpu_count} GPUs${nodes}; cost per GPU ${money(p.cost_per_gpu_usd)}${scaling}`;
  }

  // The input pipeline's share of a step (issue 26): who sets the step, and the echo factor that would hide it.
  function inputLine(p) {
    if (typeof p.input_ms !== "number") return "";
    if (!p.input_bound) return `<br>input pipeline keeps up (${duration(p.input_ms / 1000)} a step)`;
    return `<br><b>input-bound</b>: images take ${duration(p.input_ms / 1000)} a step, ${p.input_bound_ratio.toFixed(1)}× the GPU step;`
      + ` data echoing ×${p.echo_factor} would hide it (up to ${duration(p.echo_total_seconds)} in all, if echoed images help as much as fresh ones)`;
  }

  function timeTraces(ctx, points, source) {
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

  // The memory of one GPU of a machine type (the API lists the machine's total), or its RAM for a CPU type.
  function deviceMemoryGib(machine) {
    const m = machineSpec(machine);
    if (!m) return null;
    if (m.gpu && m.gpu_memory_gib) return m.gpu_memory_gib / (m.gpu_count || 1);
    return m.memory_gib || null;
  }

  function memoryText(p, machine) {
    if (typeof p.peak_memory_gib !== "number") return p.fits_in_memory === null ? "<br>fit in memory not checked" : "";
    const device = deviceMemoryGib(machine);
    const of = device ? ` of ${sig3(device)} GiB` : "";
    const fit = p.fits_in_memory === false ? " — does not fit" : p.fits_in_memory === true ? " — fits" : "";
    return `<br>peak memory ${sig3(p.peak_memory_gib)} GiB${of}${fit}`;
  }

  // What a machine type's memory line is called: its GPU model, or the RAM of a CPU machine type.
  function deviceName(machine) {
    const m = machineSpec(machine);
    return m && m.gpu ? m.gpu : `${machine} RAM`;
  }

  // Peak memory against batch size, one line per CNN (issue 27): the memory model mostly answers the same for every
  // machine type, so machine types whose curves are equal share a line, named by them when a CNN needs several.
  // Each device memory is one dotted line labelled with the GPUs that have it (points that do not fit are drawn too:
  // that is the question this plot answers).
  function memoryTraces(cnns, machines, pairs) {
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

  function costTrace(ctx, best, all, label) {
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

  function hexToRgba(hex, alpha) {
    const n = parseInt(hex.slice(1), 16);
    return `rgba(${(n >> 16) & 255}, ${(n >> 8) & 255}, ${n & 255}, ${alpha})`;
  }

  // Batch sizes as runs of the requested list: "8, 16, 129–256" instead of a hundred numbers.
  function sizeRuns(sizes, requested) {
    const index = new Map(requested.map((b, i) => [b, i]));
    const runs = [];
    for (const b of sizes) {
      const last = runs[runs.length - 1];
      if (last && index.get(b) === index.get(last[1]) + 1) last[1] = b;
      else runs.push([b, b]);
    }
    return runs.map(([a, b]) => (a === b ? String(a) : index.get(b) - index.get(a) === 1 ? `${a}, ${b}` : `${a}–${b}`)).join(", ");
  }

  function listed(names, most = 6) {
    return names.length <= most ? names.join(", ") : `${names.slice(0, most).join(", ")} and ${names.length - most} more`;
  }

  // Say where the numbers come from, and why a CNN × machine × batch size has no point: no model for the machine,
  // or out of memory.
  function explainGaps(result, cnns, machines, pairs) {
    const models = result.models || {};
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
      note(`${capitalize(result.gpu_note)} (${listed(multi)} ${multi.length > 1 ? "have" : "has"} several GPUs).`,
           "info", "gpu-note");
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
    const free = machines.filter((m) => { const s = machineSpec(m); return s && !s.price_usd_per_hour; });
    if (free.length) note(`${listed(free)} ${free.length > 1 ? "have" : "has"} no hourly price, so ${free.length > 1 ? "their" : "its"} cost is $0.`);
    // In plain words (issue 27): what each fitted model learnt from; the model's kind is in the note's tooltip.
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

  function renderBest(result, cnns, machines, pairs) {
    const models = result.models || {};
    const rows = (result.best || []).slice().sort((a, b) =>
      cnns.indexOf(a.cnn) - cnns.indexOf(b.cnn) || machines.indexOf(a.machine) - machines.indexOf(b.machine));
    // On one machine type the cost is the time × the price: the fastest batch size is nearly always the cheapest
    // too. Then one "best" group of columns (issue 27); both only where some row's two differ.
    const same = (b) => !b.min_time || !b.min_cost || b.min_time.batch_size === b.min_cost.batch_size;
    const one = rows.every(same);
    const group = (title) => [title, "Time", "Cost", "Energy"];
    const titles = ["CNN", "Machine",
                    ...(one ? group("Best batch size (fastest and cheapest)") : [...group("Fastest batch size"), ...group("Cheapest batch size")]),
                    "Largest batch that fits", "Source"];
    const head = el("tr", {}, ...titles.map((h, i) => el("th", { text: h, class: i >= 2 && i < titles.length - 1 ? "num" : "" })));
    const energy = (v) => (typeof v === "number" ? `≤ ${sig3(v)} kWh` : "—");
    // Energy is the chosen point's (best entries carry time and cost only).
    const cells = (pick, points) => pick
      ? [el("td", { class: "num", text: String(pick.batch_size) }), el("td", { class: "num", text: duration(pick.total_seconds) }),
         el("td", { class: "num", text: money(pick.cost_usd) }), el("td", { class: "num", text: energy((points.find((p) => p.batch_size === pick.batch_size) || {}).energy_kwh) })]
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

  // The specs table: the chosen machine types first, the others behind a toggle (issue 27).
  function renderMachines() {
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

  function toggleMachines() {
    state.allMachines = !state.allMachines;
    renderMachines();
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
    await register($("#upload-button"), message, `Uploading ${file.name}…`, async () => {
      const { data } = await api("POST", "v1/cnns", form);
      await loadCnns();
      cnnPicker.toggle(data.name, true);
      return `Registered ${data.name} (${data.source}${data.parameters ? ", " + parameters(data.parameters) : ""}); `
        + "it is now chosen in the CNN list.";
    });
  }

  // Sends a registration with its button disabled meanwhile; says what happened, or the API's problem.
  async function register(button, message, busy, send) {
    button.disabled = true;
    message.textContent = busy;
    try {
      const done = await send();
      message.className = "ok";
      message.textContent = done;
    } catch (err) {
      message.className = "error";
      message.replaceChildren(el("strong", { text: `${err.title}: ` }), richText(err.message));
    } finally {
      button.disabled = false;
    }
  }

  // ---- registering a GPU machine type by its figures ------------------------------------------

  const GPU_TEXT_FIELDS = new Set(["name", "gpu", "gpu_compute_capability"]);

  async function addGpu(event) {
    event.preventDefault();
    const message = $("#gpu-message");
    message.className = "";
    const body = {};
    for (const input of $("#gpu-form").querySelectorAll("input[name]")) {
      const text = input.value.trim();
      if (!text) {
        if (input.required) {
          message.className = "error";
          message.textContent = `Fill in ${input.parentElement.firstChild.textContent.trim()}.`;
          input.focus();
          return;
        }
        continue;  // optional and empty: not sent
      }
      if (GPU_TEXT_FIELDS.has(input.name)) {
        body[input.name] = text;
      } else {
        const value = Number(text);
        if (!Number.isFinite(value)) {
          message.className = "error";
          message.textContent = `${input.parentElement.firstChild.textContent.trim()} must be a number (got "${text}").`;
          return;
        }
        body[input.name] = value;
      }
    }
    const bf16 = $("#gpu-form select[name=gpu_bf16]").value;
    if (bf16) body.gpu_bf16 = bf16 === "true";  // empty: the API decides from the compute capability
    await register($("#gpu-button"), message, `Registering ${body.name}…`, async () => {
      const { data } = await api("POST", "v1/machines", body);
      await loadMachines();
      machinePicker.toggle(data.name, true);
      return `Registered ${data.name} (${gpuText(data)}, ${hourly(data.price_usd_per_hour || 0)}/h); `
        + "it is now chosen in the machine type list.";
    });
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

  // The CNN and machine lists; asks for a key first when there is none, and again while the API refuses it.
  async function loadLists() {
    if (!apiKey()) await keyEntered("");
    for (;;) {
      try {
        await Promise.all([loadCnns(), loadMachines()]);
        return;
      } catch (err) {
        if (err.status !== 401) throw err;
        await keyEntered(`${err.title}: ${err.message}. Enter a valid key.`);
      }
    }
  }

  async function start() {
    $("#key-form").addEventListener("submit", saveKey);
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
})();
