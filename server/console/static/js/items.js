// Items of a response (input and output) as elements, and a response drawn as its events arrive.

import { h, number } from "./dom.js";

function textOf(content) {
  if (typeof content === "string") return content;
  return (content || []).map((part) => part.text ?? part.refusal ?? (part.type ? `[${part.type}]` : "")).join("");
}

function annotations(content) {
  const notes = (content || []).flatMap((part) => part.annotations || []);
  if (!notes.length) return null;
  return h("ul", { className: "muted" }, notes.map((note) =>
    h("li", {}, `${note.type}: ${note.filename || note.file_id || note.url || ""}`)));
}

function code(value) {
  if (value === undefined || value === null || value === "") return null;
  let shown = value;
  if (typeof value === "string") {
    try { shown = JSON.stringify(JSON.parse(value), null, 2); } catch (_) { shown = value; }
  } else {
    shown = JSON.stringify(value, null, 2);
  }
  return h("pre", {}, shown);
}

function reasoningText(item) {
  const parts = [...(item.summary || []), ...(item.content || [])];
  return parts.map((part) => part.text).join("\n\n") || (item.encrypted_content ? "(encrypted)" : "");
}

const TITLES = {
  message: (item) => `${item.role || "assistant"} message`,
  reasoning: () => "reasoning",
  function_call: (item) => `function call · ${item.name}`,
  function_call_output: () => "function output",
  mcp_call: (item) => `MCP call · ${item.server_label} · ${item.name}`,
  mcp_list_tools: (item) => `MCP tools · ${item.server_label}`,
  mcp_approval_request: (item) => `approval asked · ${item.server_label} · ${item.name}`,
  mcp_approval_response: (item) => `approval ${item.approve ? "given" : "refused"}`,
  file_search_call: () => "file search",
  tool_search_call: (item) => `tool search · ${item.execution}`,
  tool_search_output: (item) => `tools loaded · ${(item.tools || []).map((tool) => tool.name || tool.server_label).join(", ")}`,
};

function body(item) {
  switch (item.type) {
    case "message":
      return [h("div", { className: "text" }, textOf(item.content)), annotations(item.content)];
    case "reasoning":
      return [h("div", { className: "text" }, reasoningText(item))];
    case "function_call":
      return [code(item.arguments)];
    case "function_call_output":
    case "custom_tool_call_output":
      return [code(item.output)];
    case "mcp_call":
      return [code(item.arguments), item.error ? h("p", { className: "error" }, item.error) : code(item.output)];
    case "mcp_list_tools":
      return [h("div", {}, (item.tools || []).map((tool) => tool.name).join(", "))];
    case "mcp_approval_request":
      return [code(item.arguments)];
    case "file_search_call":
      return [h("div", {}, (item.queries || []).join(" · ")),
        (item.results || []).length ? h("ol", {}, item.results.map((hit) =>
          h("li", {}, `${hit.filename} (${Number(hit.score).toFixed(3)}): ${String(hit.text).slice(0, 200)}`))) : null];
    default:
      return [code(Object.fromEntries(Object.entries(item).filter(([key]) => !["id", "type", "status"].includes(key))))];
  }
}

/** One item as an element; `actions(item)` may add controls (the playground's approval buttons). */
export function renderItem(item, actions) {
  const title = (TITLES[item.type] || ((it) => it.type))(item);
  const status = item.status && item.status !== "completed" ? ` · ${item.status}` : "";
  return h("article", { className: "item", "data-type": item.type, "data-id": item.id || "" },
    h("div", { className: "kind" }, title + status), body(item), actions ? actions(item) : null);
}

export function renderUsage(response) {
  const usage = response.usage;
  if (!usage) return null;
  const cached = usage.input_tokens_details?.cached_tokens;
  const reasoning = usage.output_tokens_details?.reasoning_tokens;
  return h("p", { className: "muted", "data-usage": "" },
    `${number(usage.input_tokens)} input tokens${cached ? ` (${number(cached)} cached)` : ""} · `
    + `${number(usage.output_tokens)} output tokens${reasoning ? ` (${number(reasoning)} reasoning)` : ""}`);
}

const DELTAS = {
  "response.output_text.delta": "text",
  "response.refusal.delta": "text",
  "response.reasoning_text.delta": "text",
  "response.reasoning_summary_text.delta": "text",
  "response.function_call_arguments.delta": "code",
  "response.mcp_call_arguments.delta": "code",
  "response.custom_tool_call_input.delta": "code",
};

/** A response drawn into `container` event by event, as the SDK's stream accumulator builds it: an element per
 * output item, deltas appended as they come, each item redrawn whole when it is done. */
export class LiveResponse {
  constructor(container, actions) {
    this.container = container;
    this.actions = actions;
    this.items = new Map(); // output_index -> { element, growing }
    this.response = null;
  }

  apply(event) {
    if (event.response) this.response = event.response;
    if (event.type === "response.output_item.added") {
      const element = renderItem({ ...event.item, content: [], summary: [], arguments: "" });
      const growing = h(event.item.type === "message" || event.item.type === "reasoning" ? "div" : "pre",
        { className: "text", "data-growing": "" });
      element.append(growing);
      this.items.set(event.output_index, { element, growing });
      this.container.append(element);
    } else if (DELTAS[event.type] && this.items.has(event.output_index)) {
      this.items.get(event.output_index).growing.append(event.delta);
    } else if (event.type === "response.output_item.done" && this.items.has(event.output_index)) {
      const entry = this.items.get(event.output_index);
      const done = renderItem(event.item, this.actions);
      entry.element.replaceWith(done);
      entry.element = done;
    }
  }
}
