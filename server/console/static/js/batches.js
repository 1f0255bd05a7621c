// Batches: the project's batches (/v1/batches) with their progress, and one batch opened: its counts, its output
// and error lines (each answer's text, and a link to the response where it was stored), and Cancel while it runs.

import { call, text } from "./api.js";
import { errorLine, h, number, statusBadge, when } from "./dom.js";

const RUNNING = new Set(["validating", "in_progress", "finalizing", "cancelling"]);
const SHOWN_LINES = 100; // lines of a file shown on the page (the file itself has them all)

function progress(batch) {
  const counts = batch.request_counts || { total: 0, completed: 0, failed: 0 };
  const done = counts.completed + counts.failed;
  return h("span", { className: "progress" },
    h("progress", { max: counts.total || 1, value: done, "aria-label": `${batch.id}: ${done} of ${counts.total} requests` }),
    ` ${number(done)} / ${number(counts.total)}`);
}

export async function renderList(main, signal) {
  const state = h("p", { role: "status", className: "muted" });
  const list = h("div", { id: "bt-list" });
  main.replaceChildren(h("h1", {}, "Batches"), state, list);
  const refresh = async () => {
    const page = await call("GET", "/v1/batches?limit=100", undefined, signal);
    list.replaceChildren(page.data.length ? table(page.data) : h("p", { className: "muted" },
      "No batches yet: upload a JSONL file of requests (purpose \"batch\") and create one with client.batches.create."));
    return page.data.some((batch) => RUNNING.has(batch.status));
  };
  try {
    while (await refresh() && !signal.aborted) await new Promise((done) => setTimeout(done, 2000));
  } catch (error) {
    if (!signal.aborted) state.replaceChildren(errorLine(error));
  }
}

function table(batches) {
  return h("table", {}, h("thead", {}, h("tr", {}, ["Batch", "Status", "Progress", "Failed", "Model", "Made"].map((name) => h("th", { scope: "col" }, name)))),
    h("tbody", {}, batches.map((batch) => h("tr", { "data-id": batch.id },
      h("td", {}, h("a", { href: `#/batches/${batch.id}` }, batch.id)), h("td", {}, statusBadge(batch.status)),
      h("td", {}, progress(batch)), h("td", {}, number(batch.request_counts?.failed)),
      h("td", {}, batch.model || ""), h("td", {}, when(batch.created_at))))));
}

export async function renderDetail(main, batchId, signal) {
  const state = h("p", { role: "status", className: "muted" });
  const summary = h("div", { id: "bt-summary" });
  const output = h("section", { id: "bt-output", "aria-label": "Output" });
  const errors = h("section", { id: "bt-errors", "aria-label": "Errors" });
  main.replaceChildren(h("h1", {}, `Batch ${batchId}`), state, summary, output, errors);
  try {
    let batch = await call("GET", `/v1/batches/${encodeURIComponent(batchId)}`, undefined, signal);
    for (;;) {
      summary.replaceChildren(describe(batch, main, signal));
      if (!RUNNING.has(batch.status) || signal.aborted) break;
      await new Promise((done) => setTimeout(done, 2000));
      batch = await call("GET", `/v1/batches/${encodeURIComponent(batchId)}`, undefined, signal);
    }
    await showFile(output, "Output", batch.output_file_id, signal);
    await showFile(errors, "Errors", batch.error_file_id, signal);
  } catch (error) {
    if (!signal.aborted) state.replaceChildren(errorLine(error));
  }
}

function describe(batch, main, signal) {
  const cancel = RUNNING.has(batch.status) && batch.status !== "cancelling"
    ? h("button", { type: "button", id: "bt-cancel", onclick: async () => {
      await call("POST", `/v1/batches/${encodeURIComponent(batch.id)}/cancel`);
      await renderDetail(main, batch.id, signal);
    } }, "Cancel") : null;
  const times = ["created_at", "in_progress_at", "finalizing_at", "completed_at", "failed_at", "cancelled_at", "expired_at"]
    .filter((name) => batch[name]).map((name) => h("li", {}, `${name.replace(/_at$/, "").replace("_", " ")}: ${when(batch[name])}`));
  const problems = (batch.errors?.data || []).map((error) => h("li", {}, `line ${error.line ?? "—"}: ${error.code}: ${error.message}`));
  return h("div", { className: "panel" }, h("p", {}, statusBadge(batch.status), " ", progress(batch), " ", cancel),
    h("ul", { className: "muted" }, times), problems.length ? h("ul", { id: "bt-problems", className: "error" }, problems) : null);
}

async function showFile(section, title, fileId, signal) {
  if (!fileId) return;
  const raw = await text(`/v1/files/${encodeURIComponent(fileId)}/content`, signal); // (with the key: no plain link)
  const lines = raw.split("\n").filter(Boolean).map((line) => JSON.parse(line));
  const saved = URL.createObjectURL(new Blob([raw], { type: "application/jsonl" }));
  section.replaceChildren(h("h2", {}, `${title} (${number(lines.length)})`),
    h("p", {}, h("a", { href: saved, download: `${fileId}.jsonl`, id: `bt-${title.toLowerCase()}-file` }, "The whole file (JSONL)")),
    h("table", {}, h("thead", {}, h("tr", {}, ["Request", "Status", "Answer"].map((name) => h("th", { scope: "col" }, name)))),
      h("tbody", {}, lines.slice(0, SHOWN_LINES).map(row))));
}

function row(line) {
  const body = line.response?.body || {};
  const answer = body.error ? body.error.message : line.error ? line.error.message
    : (body.output || []).filter((item) => item.type === "message").flatMap((item) => item.content).map((part) => part.text || "").join("");
  const stored = body.id && body.store !== false ? h("a", { href: `#/responses/${body.id}` }, body.id) : null;
  return h("tr", { "data-custom-id": line.custom_id }, h("td", {}, line.custom_id),
    h("td", {}, line.response ? String(line.response.status_code) : line.error?.code || ""),
    h("td", { className: "answer" }, answer.slice(0, 300), stored ? h("br") : null, stored));
}
