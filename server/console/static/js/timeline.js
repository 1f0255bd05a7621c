// A response's timeline (GET /v1/responses/{id}/timeline, this server's extension): its phases as it was served,
// each a row with its times and a bar on one scale, drawn from what the server stored (no trace collector).

import { h } from "./dom.js";

function label(phase) {
  const details = [phase.tool && `${phase.server ? `${phase.server} · ` : ""}${phase.tool}`, phase.status,
    phase.output_tokens !== undefined && `${phase.output_tokens} tokens`].filter(Boolean);
  return details.length ? `${phase.name} (${details.join(", ")})` : phase.name;
}

/** The phases as a table: a moment is a mark on the bar's scale, a span of time a bar. */
export function renderTimeline(timeline) {
  const phases = timeline.phases || [];
  if (!phases.length) return h("p", { className: "muted", id: "timeline" }, "No timeline was kept for this response.");
  const end = Math.max(1, ...phases.map((phase) => phase.end_ms ?? phase.at_ms ?? 0));
  const percent = (ms) => `${((100 * ms) / end).toFixed(2)}%`;
  return h("table", { id: "timeline", className: "timeline" },
    h("caption", { className: "muted" }, `Phases in milliseconds since the request arrived (${end.toFixed(0)} ms in all)`),
    h("thead", {}, h("tr", {}, ["Phase", "From", "To", ""].map((name) => h("th", { scope: "col" }, name)))),
    h("tbody", {}, phases.map((phase) => {
      const start = phase.start_ms ?? phase.at_ms;
      const bar = phase.start_ms !== undefined
        ? h("span", { className: "bar", style: `left: ${percent(start)}; width: max(2px, ${percent((phase.end_ms ?? start) - start)})` })
        : h("span", { className: "bar moment", style: `left: ${percent(start)}` });
      return h("tr", { "data-phase": phase.name }, h("td", {}, label(phase)), h("td", { className: "num" }, start.toFixed(1)),
        h("td", { className: "num" }, phase.end_ms !== undefined ? phase.end_ms.toFixed(1) : ""), h("td", { className: "track" }, bar));
    })));
}
