// Stored responses: a list (newest first, filtered, by cursor), one response item by item with its chain, and a
// conversation's items.

import { allItems, call, events, TERMINAL } from "./api.js";
import { errorLine, h, number, statusBadge, when } from "./dom.js";
import { LiveResponse, renderItem, renderUsage } from "./items.js";
import { renderTimeline } from "./timeline.js";

const STATUSES = ["", "completed", "in_progress", "queued", "incomplete", "failed", "cancelled"];

function seconds(localTime) {
  return localTime ? String(Math.floor(new Date(localTime).getTime() / 1000)) : "";
}

function preview(response) {
  const message = (response.output || []).find((item) => item.type === "message");
  const text = (message?.content || []).map((part) => part.text || "").join("");
  return text.length > 90 ? `${text.slice(0, 90)}…` : text;
}

export async function renderList(main) {
  const filters = h("form", { className: "row panel", "aria-label": "Filters" },
    h("div", {}, h("label", { for: "rl-status" }, "Status"),
      h("select", { id: "rl-status" }, STATUSES.map((status) => h("option", { value: status }, status || "any")))),
    h("div", {}, h("label", { for: "rl-model" }, "Model"), h("input", { id: "rl-model", type: "text" })),
    h("div", {}, h("label", { for: "rl-after-time" }, "Created from"), h("input", { id: "rl-after-time", type: "datetime-local" })),
    h("div", {}, h("label", { for: "rl-before-time" }, "Created before"), h("input", { id: "rl-before-time", type: "datetime-local" })),
    h("button", { type: "submit", className: "primary" }, "Filter"));
  const rows = h("tbody", { id: "rl-rows" });
  const more = h("button", { type: "button", id: "rl-more", hidden: true }, "Older responses");
  const state = h("p", { role: "status", className: "muted" });
  main.replaceChildren(h("h1", {}, "Responses"), filters, state,
    h("table", {}, h("caption", { className: "muted" }, "This key's project's stored responses, newest first"),
      h("thead", {}, h("tr", {}, ["Response", "Created", "Model", "Status", "Output"].map((name) => h("th", { scope: "col" }, name)),
        h("th", { scope: "col", className: "num" }, "Tokens"))), rows), more);

  let cursor = null;
  async function load(reset) {
    const query = new URLSearchParams({ limit: "20" });
    for (const [name, id] of [["status", "rl-status"], ["model", "rl-model"]]) {
      const value = filters.querySelector(`#${id}`).value.trim();
      if (value) query.set(name, value);
    }
    const from = seconds(filters.querySelector("#rl-after-time").value);
    const until = seconds(filters.querySelector("#rl-before-time").value);
    if (from) query.set("created_after", from);
    if (until) query.set("created_before", until);
    if (!reset && cursor) query.set("after", cursor);
    try {
      const page = await call("GET", `/v1/responses?${query}`);
      if (reset) rows.replaceChildren();
      for (const response of page.data) {
        rows.append(h("tr", { "data-id": response.id },
          h("td", {}, h("a", { href: `#/responses/${response.id}` }, response.id)),
          h("td", {}, when(response.created_at)), h("td", {}, response.model), h("td", {}, statusBadge(response.status)),
          h("td", {}, preview(response)), h("td", { className: "num" }, number(response.usage?.total_tokens))));
      }
      cursor = page.last_id;
      more.hidden = !page.has_more;
      state.textContent = rows.children.length ? "" : "No stored responses match.";
    } catch (error) {
      state.replaceChildren(errorLine(error));
    }
  }
  filters.addEventListener("submit", (event) => { event.preventDefault(); load(true); });
  more.addEventListener("click", () => load(false));
  await load(true);
}

function facts(response) {
  const rows = [["Status", statusBadge(response.status)], ["Model", response.model], ["Created", when(response.created_at)],
    ["Completed", when(response.completed_at)], ["Background", response.background ? "yes" : "no"],
    ["Conversation", response.conversation ? h("a", { href: `#/conversations/${response.conversation.id}` }, response.conversation.id) : null],
    ["Instructions", typeof response.instructions === "string" ? response.instructions : null]];
  return h("dl", { className: "facts" }, rows.filter(([, value]) => value).flatMap(([name, value]) => [h("dt", {}, name), h("dd", {}, value)]));
}

async function chain(response) {
  const links = h("nav", { className: "chain", "aria-label": "Chain" });
  if (response.previous_response_id) {
    links.append(h("a", { href: `#/responses/${response.previous_response_id}`, rel: "prev", id: "chain-back" },
      `← continues ${response.previous_response_id}`));
  }
  const next = await call("GET", `/v1/responses?${new URLSearchParams({ previous_response_id: response.id, order: "asc" })}`);
  for (const later of next.data) {
    links.append(h("a", { href: `#/responses/${later.id}`, rel: "next" }, `continued by ${later.id} →`));
  }
  if (!links.children.length) links.append(h("span", { className: "muted" }, "Neither continues nor is continued."));
  return links;
}

export async function renderDetail(main, responseId, signal) {
  main.replaceChildren(h("h1", {}, "Response ", h("code", {}, responseId)), h("p", { role: "status", className: "muted" }, "Loading…"));
  try {
    const response = await call("GET", `/v1/responses/${responseId}`);
    const output = h("section", { "aria-label": "Output items", id: "output-items" });
    const header = [h("h1", {}, "Response ", h("code", {}, responseId)), facts(response), await chain(response),
      response.error ? errorLine(response.error) : null, renderUsage(response)];
    const inputs = await allItems(`/v1/responses/${responseId}/input_items`);
    main.replaceChildren(...header.filter(Boolean),
      h("h2", {}, "Input items"), h("section", { "aria-label": "Input items", id: "input-items" }, inputs.map((item) => renderItem(item))),
      h("h2", {}, "Output items"), output);
    if (TERMINAL_STATUSES.has(response.status)) {
      output.append(...(response.output || []).map((item) => renderItem(item)));
      main.append(h("h2", {}, "Timeline"), renderTimeline(await call("GET", `/v1/responses/${responseId}/timeline`)));
      return;
    }
    const live = new LiveResponse(output); // still running: follow its events, then show what it ended as
    for await (const event of events(`/v1/responses/${responseId}?stream=true`, undefined, signal)) {
      live.apply(event);
      if (TERMINAL.has(event.type)) break;
    }
    if (!signal.aborted) await renderDetail(main, responseId, signal);
  } catch (error) {
    if (error.name !== "AbortError") main.append(errorLine(error));
  }
}

const TERMINAL_STATUSES = new Set(["completed", "failed", "incomplete", "cancelled"]);

export async function renderConversation(main, conversationId) {
  main.replaceChildren(h("h1", {}, "Conversation ", h("code", {}, conversationId)));
  try {
    const items = await allItems(`/v1/conversations/${conversationId}/items`);
    main.append(h("section", { "aria-label": "Conversation items" }, items.map((item) => renderItem(item))));
  } catch (error) {
    main.append(errorLine(error));
  }
}
