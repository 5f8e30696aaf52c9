// The page's shared state, and what it knows of each machine type from GET /v1/machines.

export const state = {
  cnns: [],          // from GET /v1/cnns
  machines: [],      // from GET /v1/machines
  jobId: null,       // the job being followed
  generation: 0,     // bumped on each search so an older poll loop stops
  lastResult: null,
  lastRequest: null,
};

const PROVIDERS = { aws: "AWS", gcp: "Google Cloud", azure: "Azure", local: "This machine", own: "Your own" };
export function providerName(m) {
  const provider = m.provider || "";
  if (PROVIDERS[provider]) return PROVIDERS[provider];
  return m.registered ? `${provider} (registered)` : provider || "other";
}

export function gpuText(m) {
  if (!m.gpu) return m.provider === "local" ? "no GPU (this machine)" : "no GPU";
  return `${m.gpu_count > 1 ? m.gpu_count + "× " : ""}${m.gpu}`;
}

// By name; rebuilt when the list is loaded again (hover text asks once per point).
export function machineSpec(name) {
  if (state.machineIndex === undefined || state.machineIndex.list !== state.machines) {
    state.machineIndex = { list: state.machines, byName: new Map(state.machines.map((m) => [m.name, m])) };
  }
  return state.machineIndex.byName.get(name);
}

// The memory a point is checked against: what one GPU gives PyTorch as the result says (ECC's share out), else one
// GPU's datasheet memory (the API lists the machine's total), or its RAM for a CPU type.
export function deviceMemoryGib(machine) {
  const usable = state.usableMemory && state.usableMemory.get(machine);
  if (typeof usable === "number") return usable;
  const m = machineSpec(machine);
  if (!m) return null;
  if (m.gpu && m.gpu_memory_gib) return m.gpu_memory_gib / (m.gpu_count || 1);
  return m.memory_gib || null;
}

// What a machine type's memory line is called: its GPU model, or the RAM of a CPU machine type.
export function deviceName(machine) {
  const m = machineSpec(machine);
  return m && m.gpu ? m.gpu : `${machine} RAM`;
}
