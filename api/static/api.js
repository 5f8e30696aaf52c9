// Talking to the API: fetch with the API key (asked for once, kept in this browser, sent with every call).

import { $, showError, setState } from "./util.js";

class ApiError extends Error {
  constructor(title, detail, status) {
    super(detail);
    this.title = title;
    this.status = status;
  }
}

const KEY_STORAGE = "traincast.apiKey";
let memoryKey = "";  // when localStorage is unavailable (some private modes): kept for this page only
let keyWaiter = null;  // resolves the promise keyEntered() returned

export function apiKey() {
  try {
    return localStorage.getItem(KEY_STORAGE) || memoryKey;
  } catch (err) {
    return memoryKey;
  }
}

export function showKeyForm(message) {
  const box = $("#key-message");
  box.textContent = message || "";
  box.hidden = !message;
  $("#key-form").hidden = false;
  $("#api-key").value = "";
  $("#api-key").focus();
}

// Show the prompt and wait until a key is entered.
export function keyEntered(message) {
  showKeyForm(message);
  setState("key");
  return new Promise((resolve) => { keyWaiter = resolve; });
}

// otherwise: what to do with a key entered while nothing waits for one (the key button: load the lists again).
export function saveKey(event, otherwise) {
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
    otherwise().catch((err) => showError(err.title || "Could not load the lists", err.message));
  }
}

// Fetch JSON; a problem+json answer (RFC 9457) becomes an ApiError carrying its title and detail.
export async function api(method, path, body) {
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
