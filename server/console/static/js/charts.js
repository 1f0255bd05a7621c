// Charts as SVG: lines over time (the live page) and stacked bars per time bucket (usage).

const NS = "http://www.w3.org/2000/svg";
const WIDTH = 400, HEIGHT = 160, LEFT = 44, BOTTOM = 20, TOP = 8;

function svg(tag, attributes = {}, text) {
  const element = document.createElementNS(NS, tag);
  for (const [name, value] of Object.entries(attributes)) element.setAttribute(name, String(value));
  if (text !== undefined) element.textContent = text;
  return element;
}

function short(value) {
  if (value >= 1e6) return `${(value / 1e6).toFixed(1)}M`;
  if (value >= 1e3) return `${(value / 1e3).toFixed(1)}k`;
  return Number.isInteger(value) ? String(value) : value.toFixed(value < 1 ? 3 : 1);
}

function frame(title, top) {
  const chart = svg("svg", { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, class: "chart", role: "img", "aria-label": title });
  chart.append(svg("title", {}, title),
    svg("line", { class: "axis", x1: LEFT, y1: HEIGHT - BOTTOM, x2: WIDTH, y2: HEIGHT - BOTTOM }),
    svg("line", { class: "axis", x1: LEFT, y1: TOP, x2: LEFT, y2: HEIGHT - BOTTOM }),
    svg("text", { x: LEFT - 4, y: TOP + 8, "text-anchor": "end" }, short(top)),
    svg("text", { x: LEFT - 4, y: HEIGHT - BOTTOM, "text-anchor": "end" }, "0"));
  return chart;
}

/** Lines of `series` ([{name, points: [[time, value], ...]}]) over the same time axis, in `host`. */
export function lineChart(host, title, series) {
  const points = series.flatMap((line) => line.points);
  const top = Math.max(1e-9, ...points.map(([, value]) => value)) * 1.1;
  const first = Math.min(...points.map(([time]) => time)), last = Math.max(...points.map(([time]) => time));
  const span = Math.max(1, last - first);
  const latest = series.map((line) => `${line.name} ${short(line.points.at(-1)?.[1] ?? 0)}`).join(", ");
  const chart = frame(`${title}: now ${latest}`, top);
  series.forEach((line, index) => {
    const coordinates = line.points.map(([time, value]) => `${(LEFT + (time - first) / span * (WIDTH - LEFT)).toFixed(1)},`
      + `${(HEIGHT - BOTTOM - value / top * (HEIGHT - BOTTOM - TOP)).toFixed(1)}`);
    chart.append(svg("polyline", { class: `series-${index}`, points: coordinates.join(" ") }));
  });
  chart.append(svg("text", { x: WIDTH - 2, y: HEIGHT - 4, "text-anchor": "end" }, latest));
  host.replaceChildren(chart);
}

/** Stacked bars: one per bucket (`[{label, values: {group: amount}}]`), a color per group. */
export function barChart(host, title, buckets, groups) {
  const totals = buckets.map((bucket) => Object.values(bucket.values).reduce((sum, value) => sum + value, 0));
  const top = Math.max(1, ...totals) * 1.1;
  const chart = frame(`${title}: ${buckets.length} buckets, at most ${short(Math.max(0, ...totals))}`, top);
  const width = (WIDTH - LEFT) / Math.max(1, buckets.length);
  buckets.forEach((bucket, index) => {
    let base = HEIGHT - BOTTOM;
    groups.forEach((group, groupIndex) => {
      const height = (bucket.values[group] || 0) / top * (HEIGHT - BOTTOM - TOP);
      if (height <= 0) return;
      base -= height;
      const bar = svg("rect", { class: `series-${groupIndex % 4}`, x: LEFT + index * width + 1, y: base,
        width: Math.max(1, width - 2), height });
      bar.append(svg("title", {}, `${bucket.label} · ${group}: ${bucket.values[group]}`));
      chart.append(bar);
    });
  });
  host.replaceChildren(chart);
}

export function legend(names) {
  const list = document.createElement("div");
  list.className = "legend";
  names.forEach((name, index) => {
    const entry = document.createElement("span");
    const swatch = document.createElement("span");
    swatch.className = "swatch";
    swatch.style.background = `var(--chart-${(index % 4) + 1})`;
    entry.append(swatch, name);
    list.append(entry);
  });
  return list;
}
