"""Who a model's workers are: each `engines` URL as written, or, for a name that resolves to several addresses (a
Kubernetes headless Service, a scaled Compose service), one worker per address, named by its own DNS name where it
has one (a StatefulSet's pods keep theirs across restarts, so a turn's worker stays the same).

A name that resolves to one address (a router, a ClusterIP Service, one host) stays as written: TLS and the Host
header see the name the operator wrote.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from typing import Awaitable, Callable, Iterable
from urllib.parse import urlsplit

logger = logging.getLogger(__name__)
Resolve = Callable[[str, int], Awaitable[list[str]]]  # a name, its port -> a host for each of its addresses


async def resolve(host: str, port: int) -> list[str]:
    """A host for each of the name's IPv4 addresses (else IPv6 ones), each once, in a stable order: the address's
    own DNS name (its PTR record: a StatefulSet pod's stable name) where it has one, else the address."""
    loop = asyncio.get_running_loop()
    found = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    by_family = {family: sorted({entry[4][0] for entry in found if entry[0] == family})
                 for family in (socket.AF_INET, socket.AF_INET6)}
    addresses = by_family[socket.AF_INET] or by_family[socket.AF_INET6]
    if len(addresses) <= 1:
        return addresses
    return [await _name_of(address) for address in addresses]


async def _name_of(address: str) -> str:
    try:
        name, _, _ = await asyncio.to_thread(socket.gethostbyaddr, address)
        return name
    except OSError:
        return address


async def discover(urls: Iterable[str], resolver: Resolve = resolve) -> list[str]:
    """Every worker the URLs name now (a name that does not resolve stays as written: it is down, not gone)."""
    workers: list[str] = []
    for url in urls:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if not host or _is_address(host):
            workers.append(url)
            continue
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            hosts = await resolver(host, port)
        except OSError as exc:
            logger.warning("engine %s does not resolve now (%s)", url, exc)
            hosts = []
        if len(hosts) <= 1:
            workers.append(url)
            continue
        for each in hosts:
            shown = f"[{each}]" if ":" in each else each
            workers.append(parts._replace(netloc=f"{shown}:{port}").geturl())
    return list(dict.fromkeys(workers))


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False
