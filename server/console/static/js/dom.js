// A small element builder, and formats shared by the pages.

/** `h("a", {href: "#"}, "text", child)`: an element; attributes starting with "on" are listeners. */
export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else if (name === "className") element.className = value;
    else element.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : String(child));
  }
  return element;
}

export function when(seconds) {
  return seconds ? new Date(seconds * 1000).toLocaleString() : "";
}

export function number(value) {
  return value === undefined || value === null ? "" : Number(value).toLocaleString();
}

export function statusBadge(status) {
  return h("span", { className: `status-${status}` }, status);
}

export function errorLine(error) {
  return h("p", { className: "error", role: "alert" }, error.message || String(error));
}
