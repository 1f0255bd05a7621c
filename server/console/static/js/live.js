// Live: throughput, requests, time to first token and prefix-cache hits of every replica, every second, from each
// replica's /metrics (read through this server: /v1/replicas/{id}/metrics).

import { call, text } from "./api.js";
import { errorLine, h } from "./dom.js";
import { legend, lineChart } from "./charts.js";

const EVERY_MS = 1000;
const KEEP = 180; // samples on screen: three minutes

/** The sum of each metric's samples over all its labels, from Prometheus' text format. */
export function totals(exposition) {
  const sums = new Map();
  for (const line of exposition.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const name = line.slice(0, line.search(/[{\s]/));
    const rest = line[name.length] === "{" ? line.slice(line.lastIndexOf("}") + 1) : line.slice(name.length);
    const fields = rest.trim().split(/\s+/);
    const value = Number(fields[0]);
    if (Number.isFinite(value)) sums.set(name, (sums.get(name) || 0) + value);
  }
  return sums;
}

const rate = (now, before, name, seconds) => Math.max(0, ((now.get(name) || 0) - (before.get(name) || 0)) / seconds);

function ratio(now, before, part, whole) {
  const grown = (now.get(whole) || 0) - (before.get(whole) || 0);
  return grown > 0 ? ((now.get(part) || 0) - (before.get(part) || 0)) / grown : 0;
}

/** One sample of the four charts from two readings `seconds` apart. */
function sample(now, before, seconds) {
  const running = now.has("vllm:num_requests_running") ? now.get("vllm:num_requests_running")
    : now.get("responses_server_active_streams") || 0;
  return {
    tokens: rate(now, before, "responses_server_output_tokens_total", seconds),
    active: running,
    queued: (now.get("vllm:num_requests_waiting") || 0) + (now.get("responses_server_waiting_requests") || 0),
    ttft: ratio(now, before, "responses_server_time_to_first_token_seconds_sum", "responses_server_time_to_first_token_seconds_count"),
    hits: ratio(now, before, "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),
  };
}

const CHARTS = [
  ["live-tokens", "Output tokens per second", [["tokens/s", "tokens"]]],
  ["live-requests", "Requests running and queued", [["running", "active"], ["queued", "queued"]]],
  ["live-ttft", "Time to first token (mean, seconds)", [["seconds", "ttft"]]],
  ["live-cache", "Prefix cache hit ratio", [["hits", "hits"]]],
];

/** One replica's readings: the last one, and the samples drawn from each pair of readings. */
class Replica {
  constructor(id) {
    this.id = id;
    this.before = null;
    this.then = 0;
    this.samples = [];
  }

  async read(signal) {
    const now = totals(await text(`/v1/replicas/${encodeURIComponent(this.id)}/metrics`, signal));
    const at = Date.now() / 1000;
    if (this.before) {
      this.samples.push([at, sample(now, this.before, at - this.then)]);
      if (this.samples.length > KEEP) this.samples.shift();
    }
    this.before = now;
    this.then = at;
  }
}

function draw(main, replicas) {
  const named = replicas.length > 1;
  for (const [id, title, lines] of CHARTS) {
    const host = main.querySelector(`#${id}`);
    const series = replicas.flatMap((replica) => lines.map(([name, key]) => ({
      name: named ? `${replica.id} ${name}` : name,
      points: replica.samples.map(([time, values]) => [time, values[key]]),
    })));
    if (!series.some((line) => line.points.length)) continue;
    lineChart(host, title, series.filter((line) => line.points.length));
    main.querySelector(`#${id}-legend`).replaceChildren(legend(series.map((line) => line.name)));
    host.dataset.samples = String(Math.max(...replicas.map((replica) => replica.samples.length)));
    host.dataset.peak = String(Math.max(0, ...series.flatMap((line) => line.points.map(([, value]) => value))));
  }
}

export function render(main, signal) {
  const state = h("p", { role: "status", className: "muted", id: "live-state" }, "Reading the replicas' metrics…");
  const figures = CHARTS.map(([id, title]) => h("figure", {}, h("figcaption", {}, title),
    h("div", { id, "data-samples": "0" }), h("div", { id: `${id}-legend` })));
  main.replaceChildren(h("h1", {}, "Live"), h("p", { className: "muted", id: "live-replicas" }), state,
    h("div", { className: "charts" }, figures));
  const replicas = new Map();
  async function tick() {
    try {
      const listed = await call("GET", "/v1/replicas", undefined, signal);
      for (const { id } of listed.data) if (!replicas.has(id)) replicas.set(id, new Replica(id));
      for (const id of replicas.keys()) if (!listed.data.some((replica) => replica.id === id)) replicas.delete(id);
      main.querySelector("#live-replicas").textContent = `Replicas: ${[...replicas.keys()].join(", ")}`
        + " (each one's figures, all its API processes summed).";
      await Promise.all([...replicas.values()].map((replica) => replica.read(signal)));
      draw(main, [...replicas.values()]);
      state.textContent = `Updated ${new Date().toLocaleTimeString()}.`;
    } catch (error) {
      if (error.name !== "AbortError") state.replaceChildren(errorLine(error));
    }
  }
  tick();
  const timer = setInterval(tick, EVERY_MS);
  signal.addEventListener("abort", () => clearInterval(timer));
}
