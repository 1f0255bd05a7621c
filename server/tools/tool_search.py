"""Deferred tools and tool search: tools marked `defer_loading` kept out of the prompt (the model is offered the
search, with their names and descriptions, a namespace's own for its members), the server's search over them (on the
bundled embedding model where the server has it, else lexical; bench/tool_search.py measures both), and the tools
that earlier searches loaded (a `tool_search_output` item's), offered whole from then on."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterable, Sequence

import numpy as np

from server.requests import ToolSearchOutputItem
from streaming.items import ToolResult

logger = logging.getLogger(__name__)
TOOL_SEARCH = "tool_search"
MOST_FOUND = 3  # tools one search loads at most
MIN_SIMILARITY = 0.2  # an embedding search's least cosine similarity of a tool to the query
NAME_WORD_BONUS = 0.02  # an embedding search's bonus per point of the lexical score (a query naming the tool)
Embed = Callable[[str], Awaitable[bytes]]  # a text's unit vector (float32 bytes) on the embedding model
# What the model writes to search: words for what it needs (OpenAI's hosted search also takes `paths`, read here too).
PARAMETERS = {"type": "object", "properties": {"query": {
    "type": "string", "minLength": 1, "maxLength": 200, "description": "Words for what the tools should do."}},
    "required": ["query"], "additionalProperties": False}
CLIENT_PARAMETERS = {"type": "object", "properties": {"paths": {
    "type": "array", "items": {"type": "string"}, "description": "The names of the tools (or namespaces) to load."}},
    "required": ["paths"], "additionalProperties": False}  # the SDK's default schema of a client's search
_MCP_KINDS = ("mcp", "mcp_approval")  # an MCP server's tools, as server/tools/hosted.py shows them
_INTRODUCTION = ("Searches the tools below, which are not loaded yet, and loads the ones it finds: they can be called "
                 "after the search. Not loaded yet:")


@dataclass
class ToolSearch:
    """A request's `tool_search` tool: run by the server (its catalog, the deferred tools not loaded) or the client;
    or none, when only the tools earlier searches loaded are offered."""

    entry: dict[str, Any] | None  # the request's tool_search tool
    embed: Embed | None = None  # the embedding model's (None: the search is lexical)
    catalog: list[dict[str, Any]] = field(default_factory=list)  # as last offered: the deferred tools not loaded

    @property
    def runs_here(self) -> bool:
        """The server runs the request's searches."""
        return self.entry is not None and not self.by_client

    @property
    def by_client(self) -> bool:
        return self.entry is not None and self.entry.get("execution") == "client"

    def offered(self, tools: list[dict[str, Any]], items: list[Any]) -> list[dict[str, Any]]:
        """The tools the model is offered: `tools` without the deferred ones no search has loaded (kept as the
        catalog), with those that searches in `items` loaded, and the search itself while there is anything to find
        (a client's search: always)."""
        offered, self.catalog = split_deferred(tools, loaded_tools(items))
        if self.entry is None:
            return offered
        if self.by_client:
            return [*offered, {"type": TOOL_SEARCH, "name": TOOL_SEARCH, "execution": "client",
                               "description": self.entry.get("description") or _INTRODUCTION.split(":")[0] + ".",
                               "parameters": self.entry.get("parameters") or CLIENT_PARAMETERS}]
        if not self.catalog:
            return offered
        return [*offered, {"type": TOOL_SEARCH, "name": TOOL_SEARCH, "description": catalog_text(self.catalog),
                           "parameters": PARAMETERS}]

    async def call(self, arguments: str) -> ToolResult:
        """One search by the server: the tools found (the output item's `tools`, in `data`), and what the model
        reads of them."""
        try:
            asked = json.loads(arguments)
        except ValueError:
            asked = None
        if not isinstance(asked, dict):
            return ToolResult(error={"type": "tool_execution_error", "message": "the search's arguments are not a "
                                                                                 "JSON object"}, data=[])
        query = str(asked.get("query") or "")
        similarity = await self._similarity(query) if query and not asked.get("paths") else None
        found = found_tools(self.catalog, asked, similarity)
        return ToolResult(output=loaded_text(found), data=found)

    async def _similarity(self, query: str) -> list[float] | None:
        """Each catalog member's cosine similarity to `query` on the embedding model (None: no model, or it
        failed: the search is lexical). Members' vectors are kept: agents send the same tools every turn."""
        if self.embed is None:
            return None
        texts = [member_text(namespace, tool, self.catalog) for namespace, tool in _members(self.catalog)]
        try:
            wanted, *vectors = await asyncio.gather(self.embed(query), *(_kept_vector(self.embed, text)
                                                                          for text in texts))
        except Exception:  # the embedding model did not start, or failed: the words still search
            logger.warning("tool search: the embedding model failed; searching by words", exc_info=True)
            return None
        query_vector = np.frombuffer(wanted, dtype=np.float32)
        return [float(np.dot(query_vector, np.frombuffer(vector, dtype=np.float32))) for vector in vectors]


def split_deferred(tools: list[dict[str, Any]], loaded: list[dict[str, Any]]) -> tuple[list[dict[str, Any]],
                                                                                         list[dict[str, Any]]]:
    """(the tools offered, the deferred ones not loaded) of `tools`, with `loaded` (tool definitions a search
    found) offered too: a deferred tool among them is offered whole, one the request does not have is added."""
    have = {(namespace, tool.get("name")) for namespace, tool in _members(loaded)}
    offered: list[dict[str, Any]] = []
    catalog: list[dict[str, Any]] = []
    for tool in tools:
        if tool.get("type") == TOOL_SEARCH:
            continue
        if tool.get("type") == "namespace":
            members = [member for member in tool.get("tools") or [] if isinstance(member, dict)]  # (checked as read)
            deferred = [m for m in members if m.get("defer_loading") and (tool.get("name"), m.get("name")) not in have]
            kept = [_undeferred(m) for m in members if m not in deferred]
            if deferred:
                catalog.append({**tool, "tools": deferred})
            if kept:
                offered.append({**tool, "tools": kept})
        elif tool.get("defer_loading") and (None, tool.get("name")) not in have:
            catalog.append(tool)
        else:
            offered.append(_undeferred(tool))
    return _with_loaded(offered, loaded), catalog


def _with_loaded(offered: list[dict[str, Any]], loaded: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`offered` with the loaded definitions it lacks (a client's search may load tools of its own)."""
    present = {(namespace, tool.get("name")) for namespace, tool in _members(offered)}
    out = list(offered)
    spaces = {tool.get("name"): tool for tool in loaded if tool.get("type") == "namespace"}
    for namespace, member in _members(loaded):
        if (namespace, member.get("name")) in present or (namespace is not None and namespace not in spaces):
            continue  # there already; or an MCP server's tool that the request does not offer
        present.add((namespace, member.get("name")))
        if namespace is None:
            out.append(_undeferred(member))
            continue
        at = next((index for index, tool in enumerate(out)
                   if tool.get("type") == "namespace" and tool.get("name") == namespace), None)
        if at is None:
            out.append({**spaces[namespace], "tools": [_undeferred(member)]})
        else:
            out[at] = {**out[at], "tools": [*out[at]["tools"], _undeferred(member)]}
    return out


def loaded_tools(items: Iterable[Any]) -> list[dict[str, Any]]:
    """The tool definitions the searches among `items` loaded, in order."""
    return [tool for item in items if isinstance(item, ToolSearchOutputItem)
            for tool in item.tools if isinstance(tool, dict)]


def loaded_text(found: list[dict[str, Any]]) -> str:
    """What the model reads of a search's result: the tools it loaded, by name (their schemas are offered now)."""
    if not found:
        return "No tools matched; try other words."
    names = []
    for namespace, tool in _members(found):
        names.append(f"{namespace}__{tool.get('name')}" if namespace else str(tool.get("name")))
    return f"Loaded, and can be called now: {', '.join(names)}."


def catalog_text(catalog: list[dict[str, Any]]) -> str:
    """The search's description: what it can load, each deferred function by its name and description, a
    namespace by its own (its members' names and schemas are what a search loads)."""
    lines = [_INTRODUCTION]
    for tool in catalog:
        description = str(tool.get("description") or "").strip()
        kind = " (a namespace of tools)" if tool.get("type") == "namespace" else ""
        lines.append(f"- {tool.get('name')}{kind}: {description}" if description else f"- {tool.get('name')}{kind}")
    return "\n".join(lines)


_VECTORS: dict[str, bytes] = {}  # a member's text -> its vector (kept up to MOST_KEPT, then started again)
MOST_KEPT = 4096


async def _kept_vector(embed: Embed, text: str) -> bytes:
    vector = _VECTORS.get(text)
    if vector is None:
        vector = await embed(text)
        if len(_VECTORS) >= MOST_KEPT:
            _VECTORS.clear()
        _VECTORS[text] = vector
    return vector


def member_text(namespace: str | None, tool: dict[str, Any], catalog: list[dict[str, Any]]) -> str:
    """What the embedding model reads of a deferred tool: its name as words, its description, its namespace's."""
    text = f"{str(tool.get('name') or '').replace('_', ' ')}: {tool.get('description') or ''}"
    space = next((entry for entry in catalog if entry.get("type") == "namespace" and entry.get("name") == namespace),
                 None)
    return f"{text} ({namespace}: {space.get('description') or ''})" if space is not None else text


def found_tools(catalog: list[dict[str, Any]], asked: dict[str, Any],
                similarity: Sequence[float] | None = None) -> list[dict[str, Any]]:
    """The deferred tools a search finds (at most MOST_FOUND), as definitions (a namespace's members under it):
    those its `paths` name (a tool, `namespace.tool`, or a whole namespace), else those nearest its `query`: by
    `similarity` (each member's to the query, on the embedding model) with a bonus for shared words, or, without
    it, by the words they share (a namespace's name and description count for its members)."""
    members = list(_members(catalog))
    paths = asked.get("paths")
    if isinstance(paths, list) and paths:
        wanted = {str(path) for path in paths}
        chosen = [(namespace, tool) for namespace, tool in members
                  if namespace in wanted or tool.get("name") in wanted
                  or f"{namespace}.{tool.get('name')}" in wanted or f"{namespace}__{tool.get('name')}" in wanted]
    else:
        chosen = _ranked(catalog, members, _words(str(asked.get("query") or "")), similarity)
    return _grouped(catalog, chosen[:MOST_FOUND])


def _ranked(catalog: list[dict[str, Any]], members: list[tuple[str | None, dict[str, Any]]], query: set[str],
            similarity: Sequence[float] | None) -> list[tuple[str | None, dict[str, Any]]]:
    """The members that match the query best, best first (catalog order between equals). By words: a word in a
    name counts twice a word in a description, and those scoring more than half the best are kept. By similarity:
    those at least MIN_SIMILARITY near, the words' score a small bonus."""
    namespaces = {tool.get("name"): tool for tool in catalog if tool.get("type") == "namespace"}
    scored = []
    for order, (namespace, tool) in enumerate(members):
        space = namespaces.get(namespace, {})
        names = _words(f"{tool.get('name')} {namespace or ''}")
        texts = _words(f"{tool.get('description') or ''} {space.get('description') or ''}")
        score = sum(2 if word in names else 1 if word in texts else 0 for word in query)
        if similarity is not None and similarity[order] >= MIN_SIMILARITY:
            scored.append((-(similarity[order] + NAME_WORD_BONUS * score), order, namespace, tool))
        elif similarity is None and score:
            scored.append((-score, order, namespace, tool))
    scored.sort(key=lambda entry: entry[:2])
    if similarity is not None:
        return [(namespace, tool) for _, _, namespace, tool in scored]
    best = -scored[0][0] if scored else 0
    return [(namespace, tool) for score, _, namespace, tool in scored if -score * 2 > best]


def _grouped(catalog: list[dict[str, Any]], chosen: list[tuple[str | None, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The chosen members as definitions, in the order first found: a namespace's under one entry of it, an MCP
    server's as its tool with the tools found allowed (as the SDK types a loaded server)."""
    out: list[dict[str, Any]] = []
    spaces: dict[str, dict[str, Any]] = {}
    for namespace, tool in chosen:
        if namespace is None:
            out.append(_undeferred(tool))
            continue
        if namespace not in spaces:
            source = next(entry for entry in catalog if entry.get("type") == "namespace" and entry.get("name") == namespace)
            spaces[namespace] = {"type": "mcp", "server_label": namespace, "allowed_tools": []} \
                if tool.get("type") in _MCP_KINDS else {**source, "tools": []}
            out.append(spaces[namespace])
        space = spaces[namespace]
        if space["type"] == "mcp":
            space["allowed_tools"].append(tool.get("name"))
        else:
            space["tools"].append(_undeferred(tool))
    return out


def _members(tools: list[dict[str, Any]]) -> Iterable[tuple[str | None, dict[str, Any]]]:
    """Each tool with the namespace it is in (None: none), a namespace's members in its place (a loaded MCP
    server's: the tools it allows, by name)."""
    for tool in tools:
        if not isinstance(tool, dict):
            continue  # (a client's tool_search_output may hold anything)
        if tool.get("type") == "mcp":
            names = tool.get("allowed_tools")
            for name in names if isinstance(names, list) else []:
                if isinstance(name, str):
                    yield tool.get("server_label"), {"name": name}
        elif tool.get("type") == "namespace":
            members = tool.get("tools")
            for member in members if isinstance(members, list) else []:
                if isinstance(member, dict):
                    yield tool.get("name"), member
        else:
            yield None, tool


def _undeferred(tool: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in tool.items() if key != "defer_loading"}


def _words(text: str) -> set[str]:
    """The words of `text` a search matches on: lowercase, longer than two letters, a plural's `s` dropped."""
    return {word[:-1] if len(word) > 3 and word.endswith("s") else word
            for word in re.findall(r"[a-z0-9]+", text.lower()) if len(word) > 2}
