// Calls to this server: the key from the tab's session storage in a header, errors as the API's error bodies.

const KEY = "responses-server-key";
export const TERMINAL = new Set(["response.completed", "response.failed", "response.incomplete", "error"]);

export function apiKey() {
  return sessionStorage.getItem(KEY) || "";
}

export function setApiKey(key) {
  if (key) sessionStorage.setItem(KEY, key);
  else sessionStorage.removeItem(KEY);
}

/** An answer that was not 2xx: its status and the OpenAI error body's message. */
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function headers(extra = {}) {
  const key = apiKey();
  return key ? { Authorization: `Bearer ${key}`, ...extra } : extra;
}

async function failure(answer) {
  let message = `${answer.status} ${answer.statusText}`;
  try {
    const body = await answer.json();
    if (body && body.error && body.error.message) message = body.error.message;
  } catch (_) { /* not JSON */ }
  if (answer.status === 401) message += " Set the API key (top right).";
  return new ApiError(answer.status, message);
}

/** The answer to a request with the key, `body` (if any) as JSON; an ApiError unless it is 2xx. */
async function fetched(method, path, body, signal) {
  const options = { method, headers: headers(body === undefined ? {} : { "Content-Type": "application/json" }), signal };
  if (body !== undefined) options.body = JSON.stringify(body);
  const answer = await fetch(path, options);
  if (!answer.ok) throw await failure(answer);
  return answer;
}

/** A JSON call: `GET /v1/...` (no body) or a POST/DELETE with a JSON body. */
export async function call(method, path, body, signal) {
  return (await fetched(method, path, body, signal)).json();
}

/** Every item of a list route (`/input_items`, a conversation's `/items`), oldest first, 100 a page. */
export async function allItems(path) {
  const items = [];
  let after = null;
  for (;;) {
    const query = new URLSearchParams({ limit: "100", order: "asc", ...(after ? { after } : {}) });
    const page = await call("GET", `${path}?${query}`);
    items.push(...page.data);
    if (!page.has_more) return items;
    after = page.last_id;
  }
}

/** The text of a GET (for /metrics). */
export async function text(path, signal) {
  return (await fetched("GET", path, undefined, signal)).text();
}

/** Server-sent events of a POST (a body) or a GET (none), each event's JSON, until the stream ends. */
export async function* events(path, body, signal) {
  const answer = await fetched(body === undefined ? "GET" : "POST", path, body, signal);
  const reader = answer.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replaceAll("\r\n", "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = frame.split("\n").filter((line) => line.startsWith("data:")).map((line) => line.slice(5).trimStart());
      if (data.length && data.join("\n") !== "[DONE]") yield JSON.parse(data.join("\n"));
    }
  }
}

/** The events of one `response.create` over a WebSocket, as the SDK's `responses.connect()` sends it; a browser
 * cannot send headers, so the key goes as a subprotocol, as OpenAI's Realtime API takes it. */
export async function* socketEvents(body, signal) {
  const url = new URL("/v1/responses", location.href);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  const protocols = apiKey() ? ["openai-responses", `openai-insecure-api-key.${apiKey()}`] : [];
  const socket = new WebSocket(url, protocols);
  const queue = [];
  let wake = null;
  const push = (entry) => { queue.push(entry); if (wake) { wake(); wake = null; } };
  socket.onmessage = (message) => push({ event: JSON.parse(message.data) });
  socket.onerror = () => push({ error: new ApiError(0, "The WebSocket failed (is the key right?).") });
  socket.onclose = () => push({ closed: true });
  socket.onopen = () => socket.send(JSON.stringify({ type: "response.create", ...body }));
  signal?.addEventListener("abort", () => socket.close());
  try {
    for (;;) {
      if (!queue.length) await new Promise((resolve) => { wake = resolve; });
      const entry = queue.shift();
      if (entry.error) throw entry.error;
      if (entry.closed) return;
      yield entry.event;
      if (TERMINAL.has(entry.event.type)) return;
    }
  } finally {
    socket.close();
  }
}
