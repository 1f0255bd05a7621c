// Prompts: the project's reusable prompts (/v1/prompts, this server's extension), a new one or a new version made
// here, and one tried: its variables filled, a message sent with `prompt: {id, version, variables}`.

import { call } from "./api.js";
import { errorLine, h, when } from "./dom.js";

function field(id, label, control, hint) {
  control.id = id;
  return h("div", { className: "field" }, h("label", { for: id }, label), control, hint ? h("p", { className: "hint" }, hint) : null);
}

/** The prompt's body from the form: instructions, and input as one user message. */
function contentOf(form) {
  const instructions = form.querySelector("#pr-instructions").value.trim();
  const input = form.querySelector("#pr-input").value.trim();
  return { ...(instructions ? { instructions } : {}), ...(input ? { input } : {}) };
}

export async function render(main, promptId) {
  const state = h("p", { role: "status", className: "muted" });
  const list = h("div", { id: "pr-list" });
  const editor = h("form", { className: "panel", "aria-label": promptId ? "New version" : "New prompt" },
    field("pr-instructions", "Instructions", h("textarea", { rows: 4 }), "Write {{name}} where a variable's value goes."),
    field("pr-input", "Input (a user message before the request's own; optional)", h("textarea", { rows: 2 })),
    h("button", { type: "submit", className: "primary", id: "pr-save" }, promptId ? "Save as a new version" : "Save prompt"));
  const tryPanel = h("section", { id: "pr-try", "aria-label": "Try it", hidden: !promptId });
  main.replaceChildren(h("h1", {}, promptId ? `Prompt ${promptId}` : "Prompts"), state,
    h("div", { className: "grid" }, h("div", {}, list, h("h2", {}, promptId ? "New version" : "New prompt"), editor), tryPanel));

  editor.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const path = promptId ? `/v1/prompts/${encodeURIComponent(promptId)}/versions` : "/v1/prompts";
      const made = await call("POST", path, contentOf(editor));
      state.textContent = `Saved ${made.id}, version ${made.version}.`;
      if (promptId) await render(main, promptId);
      else location.hash = `#/prompts/${made.id}`;
    } catch (error) {
      state.replaceChildren(errorLine(error));
    }
  });

  try {
    if (!promptId) {
      const page = await call("GET", "/v1/prompts?limit=100");
      list.replaceChildren(page.data.length ? table(page.data) : h("p", { className: "muted" }, "No prompts yet."));
      return;
    }
    const versions = (await call("GET", `/v1/prompts/${encodeURIComponent(promptId)}/versions`)).data;
    list.replaceChildren(table(versions.slice().reverse(), true));
    const latest = versions[versions.length - 1];
    editor.querySelector("#pr-instructions").value = latest.instructions || "";
    showTry(tryPanel, versions);
  } catch (error) {
    state.replaceChildren(errorLine(error));
  }
}

function table(prompts, byVersion = false) {
  return h("table", {}, h("thead", {}, h("tr", {}, ["Prompt", "Version", "Variables", "Instructions", "Made"].map((name) => h("th", { scope: "col" }, name)))),
    h("tbody", {}, prompts.map((prompt) => h("tr", {},
      h("td", {}, byVersion ? prompt.id : h("a", { href: `#/prompts/${prompt.id}` }, prompt.id)),
      h("td", {}, prompt.version), h("td", {}, prompt.variables.join(", ") || "—"),
      h("td", {}, (prompt.instructions || "").slice(0, 80)), h("td", {}, when(prompt.created_at))))));
}

function showTry(panel, versions) {
  const latest = versions[versions.length - 1];
  const form = h("form", { className: "panel", "aria-label": "Try the prompt" },
    field("pr-version", "Version", h("select", {}, versions.map((prompt) => h("option", { value: prompt.version, selected: prompt === latest }, prompt.version)))),
    h("div", { id: "pr-variables" }),
    field("pr-message", "Message", h("textarea", { rows: 2, required: true })),
    h("button", { type: "submit", className: "primary", id: "pr-run" }, "Run"));
  const answer = h("div", { id: "pr-answer", role: "region", "aria-label": "Answer", "aria-live": "polite" });
  panel.replaceChildren(h("h2", {}, "Try it"), answer, form);  // the answer above the form: in view when it comes
  const variables = form.querySelector("#pr-variables");
  const fill = () => {
    const chosen = versions.find((prompt) => prompt.version === form.querySelector("#pr-version").value);
    variables.replaceChildren(...chosen.variables.map((name) => field(`pr-var-${name}`, `{{${name}}}`, h("input", { type: "text", name, required: true }))));
  };
  form.querySelector("#pr-version").addEventListener("change", fill);
  fill();
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const values = Object.fromEntries([...variables.querySelectorAll("input")].map((input) => [input.name, input.value]));
    answer.replaceChildren(h("p", { className: "muted", role: "status" }, "Waiting for the answer…"));
    try {
      const response = await call("POST", "/v1/responses", {
        prompt: { id: latest.id, version: form.querySelector("#pr-version").value, variables: values },
        input: form.querySelector("#pr-message").value, store: true });
      const text = response.output.filter((item) => item.type === "message")
        .flatMap((item) => item.content).map((part) => part.text || "").join("");
      answer.replaceChildren(h("p", { id: "pr-output" }, text || `(${response.status}, no text)`),
        h("p", { className: "muted" }, h("a", { href: `#/responses/${response.id}` }, response.id)));
    } catch (error) {
      answer.replaceChildren(errorLine(error));
    }
  });
}
