// Live: throughput, requests, time to first token and prefix-cache hits, from this server's /metrics, every 2 s.

import { text } from "./api.js";
import { errorLine, h } from "./dom.js";
import { legend, lineChart } from "./charts.js";

const EVERY_MS = 2000;
const KEEP = 90; // samples on screen: three minutes

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
    responses: rate(now, before, "responses_server_responses_total", seconds),
  };
}

const CHARTS = [
  ["live-tokens", "Output tokens per second", [["tokens/s", "tokens"]]],
  ["live-requests", "Requests running and queued", [["running", "active"], ["queued", "queued"]]],
  ["live-ttft", "Time to first token (mean, seconds)", [["seconds", "ttft"]]],
  ["live-cache", "Prefix cache hit ratio", [["hits", "hits"]]],
];

export function render(main, signal) {
  const state = h("p", { role: "status", className: "muted", id: "live-state" }, "Reading /metrics…");
  const figures = CHARTS.map(([id, title, lines]) => h("figure", {}, h("figcaption", {}, title),
    h("div", { id, "data-samples": "0" }), legend(lines.map(([name]) => name))));
  main.replaceChildren(h("h1", {}, "Live"), h("p", { className: "muted" },
    "This server's figures (all its API processes), sampled every 2 seconds."), state, h("div", { className: "charts" }, figures));
  const samples = [];
  let before = null, then = 0;
  async function tick() {
    try {
      const now = totals(await text("/metrics", signal));
      const at = Date.now() / 1000;
      if (before) {
        samples.push([at, sample(now, before, at - then)]);
        if (samples.length > KEEP) samples.shift();
        for (const [id, title, lines] of CHARTS) {
          const host = main.querySelector(`#${id}`);
          lineChart(host, title, lines.map(([name, key]) => ({ name, points: samples.map(([time, values]) => [time, values[key]]) })));
          host.dataset.samples = String(samples.length);
          host.dataset.peak = String(Math.max(...lines.flatMap(([, key]) => samples.map(([, values]) => values[key]))));
        }
        state.textContent = `Updated ${new Date().toLocaleTimeString()}.`;
      }
      before = now;
      then = at;
    } catch (error) {
      if (error.name !== "AbortError") state.replaceChildren(errorLine(error));
    }
  }
  tick();
  const timer = setInterval(tick, EVERY_MS);
  signal.addEventListener("abort", () => clearInterval(timer));
}
