// Loading the CNN and machine type lists, and adding to them: uploading a CNN, registering a GPU machine type.

import { $, hourly, parameters, el, richText } from "./util.js";
import { state, gpuText } from "./state.js";
import { apiKey, keyEntered, api } from "./api.js";
import { cnnPicker, machinePicker } from "./pickers.js";
import { renderMachines } from "./tables.js";

export async function upload(event) {
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

const GPU_TEXT_FIELDS = new Set(["name", "gpu", "gpu_compute_capability"]);

export async function addGpu(event) {
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
  const link = $("#gpu-form select[name=gpu_link]").value;
  if (link) body.gpu_link = link;
  const rdma = $("#gpu-form select[name=network_rdma]").value;
  if (rdma) body.network_rdma = rdma === "true";
  await register($("#gpu-button"), message, `Registering ${body.name}…`, async () => {
    const { data } = await api("POST", "v1/machines", body);
    await loadMachines();
    machinePicker.toggle(data.name, true);
    return `Registered ${data.name} (${gpuText(data)}, ${hourly(data.price_usd_per_hour || 0)}/h); `
      + "it is now chosen in the machine type list.";
  });
}

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
export async function loadLists() {
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
