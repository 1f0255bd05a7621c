"""Headless Chromium (Debian's package) driven by Playwright for the console's tests: a page that records console
errors and every request to another host, screenshots, and axe-core's accessibility check."""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlsplit

CHROMIUM = "/usr/bin/chromium"
# As root in a sandbox, with no network beyond loopback: no sandbox, no GPU, and none of Chromium's own calls home.
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-features=Translate,OptimizationHints"]
SERIOUS = ("serious", "critical")


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium for a module's tests."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Watched:
    """What a page did wrong: console errors, uncaught exceptions, and requests to any host but `origin` (each
    refused before it leaves the browser)."""

    origin: str
    refusals: bool = False  # the test expects 4xx answers (the browser logs each as an error)
    errors: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)

    def attach(self, context: Any) -> None:
        context.route("**/*", self._route)

    def watch(self, page: Any) -> None:
        page.on("console", lambda message: message.type == "error" and not self._refusal(message.text)
                and self.errors.append(message.text))
        page.on("pageerror", lambda error: self.errors.append(str(error)))

    def _refusal(self, text: str) -> bool:
        return self.refusals and text.startswith("Failed to load resource: the server responded with a status of 4")

    def _route(self, route: Any) -> None:
        url = route.request.url
        if url.startswith(("data:", "blob:")) or urlsplit(url).netloc == urlsplit(self.origin).netloc:
            route.continue_()
        else:
            self.foreign.append(url)
            route.abort()


@contextmanager
def console_page(browser: Any, origin: str, dark: bool = False, refusals: bool = False,
                 viewport: tuple[int, int] = (1366, 860)) -> Iterator[Any]:
    """A page in a context of its own (its own session storage), checked when the test is done; `refusals`: 4xx
    answers are expected."""
    context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]},
                                  color_scheme="dark" if dark else "light")
    watched = Watched(origin, refusals)
    watched.attach(context)
    page = context.new_page()
    watched.watch(page)
    try:
        yield page
    finally:
        context.close()
    assert not watched.foreign, f"requests to other hosts: {watched.foreign}"
    assert not watched.errors, f"console errors: {watched.errors}"


def answered(page: Any, turns: int, timeout_ms: int) -> None:
    """Wait until the playground's `turns`-th answer has ended (its Stop button disabled again)."""
    page.wait_for_function(f"document.querySelectorAll('#pg-output section.turn').length === {turns} && "
                           "document.querySelector('#pg-stop').disabled", timeout=timeout_ms)


def watch_growth(page: Any, growing: str) -> None:
    """Record each length the text of the element `growing` (a CSS selector) takes while it is drawn."""
    page.evaluate("""(growing) => { window.sizes = new Set(); const main = document.querySelector('main');
        new MutationObserver(() => { const element = main.querySelector(growing);
          if (element) window.sizes.add(element.textContent.length); })
          .observe(main, {childList: true, subtree: true, characterData: true}); }""", growing)


def growth_steps(page: Any) -> int:
    """How many lengths the watched text took: a text drawn at once took one."""
    return int(page.evaluate("window.sizes.size"))


def serious_violations(page: Any) -> list[str]:
    """axe-core's serious and critical violations on the page as it is (axe from the pinned package, injected
    inline: nothing is fetched)."""
    import axe_playwright_python

    page.add_script_tag(path=str(Path(axe_playwright_python.__file__).parent / "axe.min.js"))
    results = page.evaluate("axe.run(document, {resultTypes: ['violations']})")
    return [f"{violation['id']}: {[node['target'] for node in violation['nodes']][:3]}"
            for violation in results["violations"] if violation["impact"] in SERIOUS]


def screenshot(page: Any, name: str, fallback: Path) -> None:
    """The page as a PNG: under $CONSOLE_SCREENSHOTS (`make screenshots`: docs/images), else `fallback`."""
    folder = Path(os.environ.get("CONSOLE_SCREENSHOTS") or fallback)
    folder.mkdir(parents=True, exist_ok=True)
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(folder / f"console-{name}.png"))
