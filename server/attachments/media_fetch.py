"""Image and file URLs fetched only where the operator allows (`--allowed-media-domains`), with a size limit and a
timeout, following no redirect."""

from __future__ import annotations

from typing import Any, Iterable
from urllib.parse import urlsplit

import httpx

from server.errors import RequestError
from server.attachments.media import MAX_IMAGE_BYTES

FETCH_TIMEOUT_SECONDS = 10.0


async def fetch_images(urls: Iterable[tuple[str, Any]], allowed_domains: tuple[str, ...]) -> dict[str, bytes]:
    """The bytes behind each http(s) URL among (param, url), by URL; a RequestError naming the part for a URL
    whose host is not allowed or that cannot be fetched. Data URLs and other values are left to the decoder."""
    wanted = {url: param for param, url in urls if isinstance(url, str) and url.startswith(("http://", "https://"))}
    if not wanted:
        return {}
    async with httpx.AsyncClient(timeout=FETCH_TIMEOUT_SECONDS, follow_redirects=False) as client:
        return {url: await _fetch(client, url, param, allowed_domains, MAX_IMAGE_BYTES, "image")
                for url, param in wanted.items()}


async def fetch_file(url: str, param: str, allowed_domains: tuple[str, ...], max_bytes: int) -> bytes:
    """The bytes behind an input_file's `file_url`, under the same guards as an image's."""
    if not url.startswith(("http://", "https://")):
        raise RequestError("A file_url must be an http(s) URL.", param=param)
    async with httpx.AsyncClient(timeout=FETCH_TIMEOUT_SECONDS, follow_redirects=False) as client:
        return await _fetch(client, url, param, allowed_domains, max_bytes, "file")


def _host(url: str, param: str, what: str) -> str:
    try:
        return urlsplit(url).hostname or ""
    except ValueError:  # a bracket left open, a character that normalizes to a delimiter, ...
        raise RequestError(f"The {what} URL is not a valid URL.", param=param) from None


async def _fetch(client: httpx.AsyncClient, url: str, param: str, allowed_domains: tuple[str, ...], max_bytes: int,
                 what: str) -> bytes:
    host = _host(url, param, what)
    if host not in allowed_domains:
        inline = "the image inline as a data URL" if what == "image" else "the file as file_data, or upload it"
        raise RequestError(f"This server does not fetch {what}s from {host or 'that URL'!r} (the operator allows: "
                           + (", ".join(allowed_domains) or "no domain") + f"); send {inline}.", param=param)
    try:
        async with client.stream("GET", url) as response:
            if response.status_code != 200:  # a redirect is not followed: it could leave the allowed domains
                raise RequestError(f"The {what} URL answered HTTP {response.status_code}.", param=param)
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > max_bytes:
                    raise RequestError(f"The {what} is larger than {max_bytes // (1024 * 1024)} MiB.", param=param)
            return bytes(body)
    except httpx.InvalidURL:
        raise RequestError(f"The {what} URL is not a valid URL.", param=param) from None
    except httpx.HTTPError as exc:
        raise RequestError(f"The {what} URL could not be fetched ({type(exc).__name__}).", param=param) from None
