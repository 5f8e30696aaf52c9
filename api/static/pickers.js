// The searchable multi-select lists of CNNs and machine types.

import { $, sig3, hourly, parameters, el } from "./util.js";
import { providerName, gpuText } from "./state.js";

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

export const cnnPicker = new Picker($("#cnn-picker"), (c) => ({
  value: c.name,
  label: c.name,
  meta: [parameters(c.parameters), c.source !== "torchvision" ? `uploaded ${c.source}` : "",
         c.image_size ? `${c.image_size} px` : ""].filter(Boolean).join(" · "),
}));
// Words a person may type for a provider: "google" finds gcp, "microsoft" finds azure.
const PROVIDER_WORDS = { aws: "aws amazon ec2", gcp: "gcp google cloud gce", azure: "azure microsoft",
                         local: "local this machine", own: "own registered mine" };

export const machinePicker = new Picker($("#machine-picker"), (m) => ({
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
