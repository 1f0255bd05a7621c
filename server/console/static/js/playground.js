// The playground: a request built from a form, streamed over SSE or the WebSocket, drawn as it arrives.

import { ApiError, call, events, socketEvents, TERMINAL } from "./api.js";
import { errorLine, h, statusBadge } from "./dom.js";
import { LiveResponse, renderUsage } from "./items.js";
import { snippets } from "./snippets.js";

const FUNCTION_PRESET = { type: "function", name: "get_weather", description: "The weather in a city.",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } };

function presetName(tool) {
  if (tool.type === "function") return "function";
  if (tool.type === "mcp") return `MCP ${tool.server_label}`;
  return tool.type.replaceAll("_", " ");
}

function field(id, labelText, control, hint) {
  control.id = id;
  return h("div", {}, h("label", { for: id }, labelText), control, hint ? h("p", { className: "hint" }, hint) : null);
}

function select(options, value) {
  return h("select", {}, options.map(([optionValue, label]) =>
    h("option", { value: optionValue, selected: optionValue === value }, label)));
}

/** The request body the form describes (throws on a tools or schema field that is not JSON). */
function bodyOf(form) {
  const value = (id) => form.querySelector(`#${id}`).value.trim();
  const body = { model: value("pg-model"), input: value("pg-input"), stream: true };
  if (value("pg-instructions")) body.instructions = value("pg-instructions");
  if (value("pg-tools")) body.tools = JSON.parse(value("pg-tools"));
  const choice = value("pg-tool-choice");
  if (choice && choice !== "auto") body.tool_choice = choice.startsWith("{") ? JSON.parse(choice) : choice;
  if (value("pg-effort")) body.reasoning = { effort: value("pg-effort") };
  if (value("pg-max-tokens")) body.max_output_tokens = Number(value("pg-max-tokens"));
  if (value("pg-format") === "json_object") body.text = { format: { type: "json_object" } };
  if (value("pg-format") === "json_schema") {
    body.text = { format: { type: "json_schema", name: "answer", strict: true, schema: JSON.parse(value("pg-schema")) } };
  }
  if (value("pg-previous")) body.previous_response_id = value("pg-previous");
  if (value("pg-conversation")) body.conversation = value("pg-conversation");
  return body;
}

export async function render(main) {
  const output = h("div", { id: "pg-output", role: "region", "aria-label": "Answers" });
  const status = h("p", { id: "pg-status", role: "status", className: "muted" });
  const snippet = h("pre", { id: "pg-snippet", className: "code", hidden: true });
  const tools = h("textarea", { rows: 5, placeholder: "[ ]" });
  const schema = h("textarea", { rows: 4 }, '{"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"], "additionalProperties": false}');
  const presets = h("div", { className: "row", id: "pg-presets" });
  const form = h("form", { className: "panel", "aria-label": "Request" },
    field("pg-model", "Model", select([], "")),
    field("pg-instructions", "Instructions", h("textarea", { rows: 2 })),
    field("pg-input", "Input", h("textarea", { rows: 4, required: true })),
    field("pg-tools", "Tools (JSON list)", tools),
    presets,
    h("div", { className: "row" },
      field("pg-tool-choice", "Tool choice", h("input", { type: "text", list: "pg-tool-choices", value: "auto", size: 14 }),
        "auto, required, none, or a JSON object"),
      h("datalist", { id: "pg-tool-choices" }, ["auto", "required", "none"].map((choice) => h("option", { value: choice }))),
      field("pg-effort", "Reasoning effort", select([["", "default"], ["minimal", "minimal"], ["low", "low"], ["medium", "medium"], ["high", "high"]], "")),
      field("pg-max-tokens", "Max output tokens", h("input", { type: "number", min: 1, value: 256 }))),
    h("div", { className: "row" },
      field("pg-format", "Output format", select([["text", "text"], ["json_object", "JSON object"], ["json_schema", "JSON schema"]], "text")),
      field("pg-transport", "Transport", select([["sse", "SSE"], ["websocket", "WebSocket"]], "sse"))),
    field("pg-schema", "JSON schema (for the JSON schema format)", schema),
    h("div", { className: "row" },
      field("pg-previous", "Previous response id", h("input", { type: "text", size: 30 })),
      field("pg-conversation", "Conversation id", h("input", { type: "text", size: 30 }))),
    h("p", { className: "hint" }, "After each answer, the next request continues it (its id fills the field above)."),
    h("div", { className: "row" },
      h("button", { type: "submit", className: "primary", id: "pg-send" }, "Send"),
      h("button", { type: "button", id: "pg-stop", disabled: true }, "Stop")),
    h("div", { className: "row" }, ["curl", "Python", "Codex config"].map((kind) =>
      h("button", { type: "button", onclick: () => showSnippet(kind) }, `Copy as ${kind}`))));
  main.replaceChildren(h("h1", {}, "Playground"), h("div", { className: "grid" }, form,
    h("section", { "aria-label": "Answer", className: "answer" }, status, output, snippet)));

  let controller = null;
  const stop = form.querySelector("#pg-stop");
  stop.addEventListener("click", () => controller?.abort());

  function showSnippet(kind) {
    try {
      snippet.textContent = snippets(bodyOf(form), location.origin)[kind];
      snippet.hidden = false;
      navigator.clipboard?.writeText(snippet.textContent).catch(() => {});
    } catch (error) {
      status.replaceChildren(errorLine(error));
    }
  }

  async function send(body) {
    controller = new AbortController();
    stop.disabled = false;
    const turn = h("section", { className: "turn", "aria-label": "Turn" });
    output.append(turn);
    turn.scrollIntoView({ block: "nearest" });  // the answer in view, however far down the form Send was
    const live = new LiveResponse(turn, approvalButtons);
    status.textContent = "Waiting for the first event…";
    try {
      const stream = form.querySelector("#pg-transport").value === "websocket"
        ? socketEvents({ ...body, stream: undefined }, controller.signal)
        : events("/v1/responses", body, controller.signal);
      for await (const event of stream) {
        if (event.type === "error") throw new ApiError(400, event.error?.message || event.message || "error");
        live.apply(event);
        if (event.type === "response.created") status.textContent = "Streaming…";
        if (TERMINAL.has(event.type)) break;
      }
      const response = live.response;
      if (response) {
        status.replaceChildren(statusBadge(response.status), ` · `, h("a", { href: `#/responses/${response.id}` }, response.id));
        if (response.error) turn.append(errorLine(response.error));
        turn.append(renderUsage(response) || "");
        if (response.store !== false && !body.conversation) form.querySelector("#pg-previous").value = response.id;
      }
    } catch (error) {
      status.replaceChildren(error.name === "AbortError" ? "Stopped." : errorLine(error));
    } finally {
      stop.disabled = true;
      controller = null;
    }
  }

  function approvalButtons(item) {
    if (item.type !== "mcp_approval_request") return null;
    const answer = (approve) => () => {
      const body = bodyOf(form);
      body.input = [{ type: "mcp_approval_response", approval_request_id: item.id, approve }];
      send(body);
    };
    return h("div", { className: "row" },
      h("button", { type: "button", className: "primary", onclick: answer(true) }, `Approve ${item.name}`),
      h("button", { type: "button", onclick: answer(false) }, "Deny"));
  }

  form.addEventListener("submit", (submitted) => {
    submitted.preventDefault();
    let body;
    try { body = bodyOf(form); } catch (error) { status.replaceChildren(errorLine(error)); return; }
    send(body);
  });

  function addTool(tool) {
    try {
      const list = tools.value.trim() ? JSON.parse(tools.value) : [];
      tools.value = JSON.stringify([...list, tool], null, 2);
    } catch (error) {
      status.replaceChildren(errorLine(error));
    }
  }

  try {
    const [models, hosted] = await Promise.all([call("GET", "/v1/models"), call("GET", "/v1/hosted_tools")]);
    const choice = form.querySelector("#pg-model");
    choice.replaceChildren(...models.data.map((model) => h("option", { value: model.id }, model.id)));
    presets.replaceChildren(...[FUNCTION_PRESET, ...hosted.data].map((tool) =>
      h("button", { type: "button", onclick: () => addTool(tool) }, `Add ${presetName(tool)}`)));
  } catch (error) {
    status.replaceChildren(errorLine(error));
  }
}
