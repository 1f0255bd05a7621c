"""Image URLs fetched only where the operator allows (`--allowed-media-domains`), with a size limit and a timeout."""

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
    fetched: dict[str, bytes] = {}
    async with httpx.AsyncClient(timeout=FETCH_TIMEOUT_SECONDS, follow_redirects=False) as client:
        for url, param in wanted.items():
            host = _host(url, param)
            if host not in allowed_domains:
                raise RequestError(f"This server does not fetch images from {host or 'that URL'!r} "
                                   "(the operator allows: " + (", ".join(allowed_domains) or "no domain") +
                                   "); send the image inline as a data URL.", param=param)
            fetched[url] = await _fetch(client, url, param)
    return fetched


def _host(url: str, param: str) -> str:
    try:
        return urlsplit(url).hostname or ""
    except ValueError:  # a bracket left open, a character that normalizes to a delimiter, ...
        raise RequestError("The image URL is not a valid URL.", param=param) from None


async def _fetch(client: httpx.AsyncClient, url: str, param: str) -> bytes:
    try:
        async with client.stream("GET", url) as response:
            if response.status_code != 200:  # a redirect is not followed: it could leave the allowed domains
                raise RequestError(f"The image URL answered HTTP {response.status_code}.", param=param)
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_IMAGE_BYTES:
                    raise RequestError(f"The image is larger than {MAX_IMAGE_BYTES // (1024 * 1024)} MiB.",
                                       param=param)
            return bytes(body)
    except httpx.InvalidURL:
        raise RequestError("The image URL is not a valid URL.", param=param) from None
    except httpx.HTTPError as exc:
        raise RequestError(f"The image URL could not be fetched ({type(exc).__name__}).", param=param) from None
