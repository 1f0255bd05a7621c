"""The `file_search` tool, run by the server: the request's settings checked (its stores the project's), the tool as
the model sees it (a function of `queries`), each call's search, and the results as the model reads them, numbered
so that its citations (`[1]`) name the result they cite."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from server.errors import RequestError
from server.retrieval.filters import Filter, checked_filter
from server.retrieval.project import ProjectRetrieval
from server.retrieval.search import Ranking, max_results, ranking
from server.retrieval.vector_stores import SearchHit
from server.tools.builtins import FILE_SEARCH
from streaming.client_calls import search_queries
from streaming.items import Citable, ToolResult

logger = logging.getLogger(__name__)
INCLUDE_RESULTS = "file_search_call.results"
DESCRIPTION = ("Searches the user's uploaded files for passages relevant to the queries. Results are numbered; when "
               "you use one, cite it by its number in square brackets, as [1].")
# Bounded (at most 3 queries of 64 characters), so that a call the model writes closes within a small budget.
PARAMETERS = {"type": "object", "properties": {"queries": {
    "type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 64}, "minItems": 1, "maxItems": 3,
    "description": "What to search for."}}, "required": ["queries"], "additionalProperties": False}


@dataclass
class FileSearch:
    """A request's `file_search` tool: its stores, filters and ranking, and what its calls found (for the model's
    citations, numbered across the response's calls)."""

    retrieval: ProjectRetrieval
    store_ids: tuple[str, ...]
    where: Filter | None
    limit: int
    rank: Ranking
    include_results: bool
    cited: list[SearchHit] = field(default_factory=list)  # every result shown to the model, [1] first

    async def call(self, arguments: str) -> ToolResult:
        """One call's search: its results as the model reads them, numbered after the earlier calls' (and as the
        item shows them when the request includes them); a search that fails is an error, never empty results."""
        queries = search_queries(arguments)
        if not queries:
            return ToolResult(error={"type": "tool_execution_error", "message": "the call names no queries"})
        try:
            hits = await self.retrieval.search(self.store_ids, queries, self.where, self.limit, self.rank,
                                               param="tools")
        except Exception as exc:  # the store went away, the embedding model failed: the call failed
            if not isinstance(exc, RequestError):
                logger.warning("a file_search call failed", exc_info=True)
            return ToolResult(error={"type": "tool_execution_error", "message": f"the search failed: {exc}"})
        first = len(self.cited) + 1
        self.cited += hits
        return ToolResult(output=results_text(hits, first), data=_results(hits) if self.include_results else None,
                          citable=tuple(Citable(hit.file_id, hit.filename) for hit in hits), first_citation=first)


def _results(hits: list[SearchHit]) -> list[dict[str, Any]]:
    """The SDK's `Result`s of a `file_search_call` item."""
    return [{"file_id": hit.file_id, "filename": hit.filename, "score": hit.score, "text": hit.text,
             "attributes": hit.attributes} for hit in hits]


def results_text(hits: list[SearchHit], first: int) -> str:
    """The results as the model reads them: each numbered, with its file (and pages), then its text."""
    if not hits:
        return "No results."
    blocks = []
    for number, hit in enumerate(hits, first):
        pages = hit.attributes.get("page_start")
        where = f", page {pages}" if pages is not None else ""
        blocks.append(f"[{number}] {hit.filename}{where}\n{hit.text}")
    return "\n\n".join(blocks)


async def file_search_tool(tools: list[dict[str, Any]], include: list[str] | None,
                           retrieval: ProjectRetrieval | None) -> FileSearch | None:
    """The request's `file_search` tool, checked (400s naming the field; a store the project lacks is a 404)."""
    found = [(index, tool) for index, tool in enumerate(tools) if tool.get("type") == FILE_SEARCH]
    if not found:
        return None
    index, tool = found[0]
    param = f"tools[{index}]"
    if len(found) > 1:
        raise RequestError("A request may offer one file_search tool.", param=f"tools[{found[1][0]}]")
    if retrieval is None:
        raise RequestError("This server runs no file_search tool: it keeps no vector stores (it has no store, or "
                           "was started with --embedding-model none).", param=param)
    store_ids = tool.get("vector_store_ids")
    if not isinstance(store_ids, list) or not store_ids or not all(isinstance(item, str) for item in store_ids):
        raise RequestError("file_search needs vector_store_ids: a non-empty list of vector store ids.",
                           param=f"{param}.vector_store_ids")
    tool_search = FileSearch(retrieval, tuple(store_ids), checked_filter(tool.get("filters"), f"{param}.filters"),
                             max_results(tool.get("max_num_results"), f"{param}.max_num_results"),
                             ranking(tool.get("ranking_options"), f"{param}.ranking_options"),
                             INCLUDE_RESULTS in (include or []))
    await retrieval.searchable(tool_search.store_ids, f"{param}.vector_store_ids")
    return tool_search


def shown_file_search() -> dict[str, Any]:
    """The tool as the model paths offer it: a function of its queries."""
    return {"type": FILE_SEARCH, "name": FILE_SEARCH, "description": DESCRIPTION, "parameters": PARAMETERS}
