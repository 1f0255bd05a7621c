// The console's shell: the key dialog, the theme, and the page each `#/...` address shows.

import { apiKey, setApiKey } from "./api.js";
import * as batches from "./batches.js";
import * as live from "./live.js";
import * as playground from "./playground.js";
import * as prompts from "./prompts.js";
import * as responses from "./responses.js";
import * as usage from "./usage.js";

const main = document.getElementById("main");
let leaving = null; // aborts the page on screen (its streams and timers) when another is shown

const ROUTES = [
  [/^#\/responses\/([\w-]+)$/, (id, signal) => responses.renderDetail(main, id, signal), "#/responses"],
  [/^#\/responses$/, () => responses.renderList(main), "#/responses"],
  [/^#\/conversations\/([\w-]+)$/, (id) => responses.renderConversation(main, id), "#/responses"],
  [/^#\/live$/, (_, signal) => live.render(main, signal), "#/live"],
  [/^#\/usage$/, () => usage.render(main), "#/usage"],
  [/^#\/prompts\/([\w-]+)$/, (id) => prompts.render(main, id), "#/prompts"],
  [/^#\/prompts$/, () => prompts.render(main), "#/prompts"],
  [/^#\/batches\/([\w-]+)$/, (id, signal) => batches.renderDetail(main, id, signal), "#/batches"],
  [/^#\/batches$/, (_, signal) => batches.renderList(main, signal), "#/batches"],
  [/^/, () => playground.render(main), "#/playground"],
];

function show() {
  leaving?.abort();
  leaving = new AbortController();
  const [pattern, page, tab] = ROUTES.find(([pattern]) => pattern.test(location.hash));
  const match = location.hash.match(pattern);
  for (const link of document.querySelectorAll("nav a")) {
    if (link.getAttribute("href") === tab) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  page(match[1], leaving.signal);
}

function keyState() {
  document.getElementById("key-state").textContent = apiKey() ? "Key set" : "No key";
}

function theme() {
  const saved = localStorage.getItem("responses-server-theme");
  if (saved) document.documentElement.dataset.theme = saved;
  document.getElementById("theme-button").addEventListener("click", () => {
    const dark = document.documentElement.dataset.theme
      ? document.documentElement.dataset.theme === "dark" : matchMedia("(prefers-color-scheme: dark)").matches;
    document.documentElement.dataset.theme = dark ? "light" : "dark";
    localStorage.setItem("responses-server-theme", document.documentElement.dataset.theme);
  });
}

function keyDialog() {
  const dialog = document.getElementById("key-dialog");
  const input = document.getElementById("key-input");
  document.getElementById("key-button").addEventListener("click", () => { input.value = apiKey(); dialog.showModal(); });
  dialog.addEventListener("close", () => {
    if (dialog.returnValue === "save") setApiKey(input.value.trim());
    if (dialog.returnValue === "clear") setApiKey("");
    if (dialog.returnValue !== "cancel") { keyState(); show(); }
  });
}

theme();
keyDialog();
keyState();
window.addEventListener("hashchange", show);
show();
