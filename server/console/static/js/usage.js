// Usage: tokens and requests per project, key and model, as a chart and a table, with a CSV export
// (from /v1/organization/usage/completions: an admin key's, or anyone's on a server without keys).

import { call } from "./api.js";
import { errorLine, h, number } from "./dom.js";
import { barChart, legend } from "./charts.js";

const RANGES = { "Last hour": [3600, "1m"], "Last day": [86400, "1h"], "Last 7 days": [7 * 86400, "1d"], "Last 30 days": [30 * 86400, "1d"] };
const COUNTS = ["num_model_requests", "input_tokens", "input_cached_tokens", "output_tokens", "output_reasoning_tokens"];
const GROUPS = ["project_id", "api_key_id", "model"];

/** Every bucket from `start`, following `next_page`. */
async function buckets(start, width, groups) {
  const found = [];
  let page = null;
  for (;;) {
    const query = new URLSearchParams({ start_time: String(start), bucket_width: width, limit: width === "1m" ? "60" : "31" });
    groups.forEach((group) => query.append("group_by", group));
    if (page) query.set("page", page);
    const answer = await call("GET", `/v1/organization/usage/completions?${query}`);
    found.push(...answer.data);
    if (!answer.has_more || !answer.next_page) return found;
    page = answer.next_page;
  }
}

function groupName(result, groups) {
  return groups.map((group) => result[group] ?? "(none)").join(" · ") || "all";
}

export function csv(rows, groups) {
  const header = ["start_time", "end_time", ...groups, ...COUNTS];
  const quote = (value) => (/[",\n]/.test(String(value)) ? `"${String(value).replaceAll('"', '""')}"` : String(value ?? ""));
  return [header, ...rows.map((row) => header.map((name) => row[name]))].map((row) => row.map(quote).join(",")).join("\n") + "\n";
}

export async function render(main) {
  const form = h("form", { className: "row panel", "aria-label": "Usage query" },
    h("div", {}, h("label", { for: "us-range" }, "Range"),
      h("select", { id: "us-range" }, Object.keys(RANGES).map((name) => h("option", { value: name, selected: name === "Last day" }, name)))),
    h("fieldset", { className: "row" }, h("legend", {}, "Group by"), GROUPS.map((group) => h("label", {},
      h("input", { type: "checkbox", name: "group", value: group, checked: group !== "api_key_id" }), ` ${group}`))),
    h("button", { type: "submit", className: "primary" }, "Show"));
  const state = h("p", { role: "status", className: "muted" });
  const chart = h("div", { id: "usage-chart" });
  const table = h("div", { id: "usage-table" });
  const download = h("a", { id: "usage-csv", hidden: true, download: "usage.csv" }, "Download CSV");
  main.replaceChildren(h("h1", {}, "Usage"), form, state, h("figure", {}, h("figcaption", {}, "Tokens (input + output) per bucket"), chart),
    h("p", {}, download), table);

  async function show() {
    const [seconds, width] = RANGES[form.querySelector("#us-range").value];
    const groups = [...form.querySelectorAll("input[name=group]:checked")].map((box) => box.value);
    state.textContent = "Loading…";
    try {
      const found = await buckets(Math.floor(Date.now() / 1000) - seconds, width, groups);
      const rows = found.flatMap((bucket) => bucket.results.map((result) => ({ ...result, start_time: bucket.start_time, end_time: bucket.end_time })));
      const names = [...new Set(rows.map((row) => groupName(row, groups)))];
      barChart(chart, "Tokens per bucket", found.map((bucket) => ({
        label: new Date(bucket.start_time * 1000).toLocaleString(),
        values: Object.fromEntries(bucket.results.map((result) => [groupName(result, groups), result.input_tokens + result.output_tokens])),
      })), names);
      chart.append(legend(names));
      const totals = new Map();
      for (const row of rows) {
        const total = totals.get(groupName(row, groups)) || Object.fromEntries(COUNTS.map((name) => [name, 0]));
        COUNTS.forEach((name) => { total[name] += row[name] || 0; });
        totals.set(groupName(row, groups), total);
      }
      table.replaceChildren(h("table", {}, h("caption", { className: "muted" }, "Totals over the range"),
        h("thead", {}, h("tr", {}, h("th", { scope: "col" }, groups.join(" · ") || "all"),
          COUNTS.map((name) => h("th", { scope: "col", className: "num" }, name.replaceAll("_", " "))))),
        h("tbody", {}, [...totals].map(([name, total]) => h("tr", {}, h("th", { scope: "row" }, name),
          COUNTS.map((count) => h("td", { className: "num" }, number(total[count]))))))));
      URL.revokeObjectURL(download.href);
      download.href = URL.createObjectURL(new Blob([csv(rows, groups)], { type: "text/csv" }));
      download.hidden = false;
      state.textContent = rows.length ? "" : "No usage in this range.";
    } catch (error) {
      state.replaceChildren(errorLine(error));
    }
  }
  form.addEventListener("submit", (event) => { event.preventDefault(); show(); });
  await show();
}
