"""Searching vector stores: each query embedded and matched by vector and by keyword, in every store at once, with
the filters in both queries; the lists fused by weighted reciprocal rank fusion, scores from 0 to 1, a threshold
applied, the best returned."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

from server import tracing
from server.errors import NotFound, RequestError
from server.retrieval.embeddings import Embeddings
from server.retrieval.filters import Filter
from server.retrieval.index import Ranked, VectorIndex
from server.retrieval.vector_stores import SearchHit, VectorStore

RRF_K = 60  # reciprocal rank fusion's constant (Cormack et al.; OGX's and agentic-api's default)
CANDIDATES = 50  # chunks each list brings to the fusion
RANKERS = ("none", "auto", "default-2024-11-15")
MAX_RESULTS = 50
_WORDS = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True)
class Ranking:
    """How results are ranked: the weights of the vector and keyword lists (one of them 0: that search alone), and
    the least score returned."""

    embedding_weight: float = 1.0
    text_weight: float = 1.0
    score_threshold: float = 0.0
    ranker: str = "auto"


def ranking(value: object, param: str = "ranking_options") -> Ranking:
    """`ranking_options` (`ranker`, `score_threshold`, and the tool's `hybrid_search` weights), checked."""
    if value is None:
        return Ranking()
    if not isinstance(value, dict):
        raise RequestError("ranking_options must be an object.", param=param)
    ranker = value.get("ranker", "auto")
    if ranker not in RANKERS:
        raise RequestError(f"ranking_options.ranker must be one of: {', '.join(RANKERS)}.", param=f"{param}.ranker")
    threshold = value.get("score_threshold", 0.0)
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 <= threshold <= 1:
        raise RequestError("score_threshold must be a number from 0 to 1.", param=f"{param}.score_threshold")
    hybrid = value.get("hybrid_search") or {}
    if not isinstance(hybrid, dict):
        raise RequestError("hybrid_search must be an object.", param=f"{param}.hybrid_search")
    weights = []
    for key in ("embedding_weight", "text_weight"):
        weight = hybrid.get(key, 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight < 0:
            raise RequestError(f"{key} must be a number of 0 or more.", param=f"{param}.hybrid_search.{key}")
        weights.append(float(weight))
    if not any(weights):
        raise RequestError("embedding_weight and text_weight cannot both be 0.", param=f"{param}.hybrid_search")
    return Ranking(weights[0], weights[1], float(threshold), ranker)


def max_results(value: object, param: str = "max_num_results", default: int = 10) -> int:
    if value is None:
        return default
    if type(value) is not int or not 1 <= value <= MAX_RESULTS:
        raise RequestError(f"max_num_results must be a whole number from 1 to {MAX_RESULTS}.", param=param)
    return value


def queries(value: object, param: str = "query") -> list[str]:
    """`query`: a string or a list of strings (each searched; their results fused)."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(item, str) and item.strip() for item in items):
        raise RequestError("query must be a non-empty string or a list of them.", param=param)
    return items


def words(query: str) -> list[str]:
    """A query's words, for the keyword search (any of them matches)."""
    return list(dict.fromkeys(word.lower() for word in _WORDS.findall(query)))[:64]


def fused(lists: Sequence[tuple[Sequence[Ranked], float]]) -> list[tuple[int, float]]:
    """Weighted reciprocal rank fusion: each chunk's sum of weight / (RRF_K + rank) over the lists, divided by the
    most any chunk could get (first in every list), so that scores run from 0 to 1; best first."""
    scores: dict[int, float] = defaultdict(float)
    for ranked, weight in lists:
        for rank, found in enumerate(ranked, 1):
            scores[found.chunk_id] += weight / (RRF_K + rank)
    best = sum(weight for _, weight in lists) / (RRF_K + 1)
    return sorted(((chunk_id, score / best) for chunk_id, score in scores.items()), key=lambda pair: -pair[1])


def nearest(lists: Sequence[Sequence[Ranked]]) -> list[tuple[int, float]]:
    """The vector lists alone: each chunk's best cosine similarity (0 when negative), best first."""
    scores: dict[int, float] = {}
    for ranked in lists:
        for found in ranked:
            scores[found.chunk_id] = max(scores.get(found.chunk_id, 0.0), max(found.score, 0.0))
    return sorted(scores.items(), key=lambda pair: -pair[1])


@dataclass
class Searcher:
    """Searches a project's vector stores with the server's embedding model."""

    index: VectorIndex
    embeddings: Embeddings

    async def stores(self, project: str, store_ids: Sequence[str], param: str) -> list[VectorStore]:
        """The stores named (a 404 for one the project does not have, a 400 for one embedded by another model)."""
        stores = []
        for store_id in dict.fromkeys(store_ids):
            store = await self.index.get_store(store_id, project)
            if store is None:
                raise NotFound(f"No vector store found with id '{store_id}'.", param=param)
            model = self.embeddings.model
            if store.embedding_model != model.name or store.dimensions != model.dimensions:
                raise RequestError(f"The vector store {store_id} was embedded with {store.embedding_model} "
                                   f"({store.dimensions} dimensions); this server embeds with "
                                   f"{self.embeddings.model.name} ({self.embeddings.model.dimensions}).", param=param)
            stores.append(store)
        return stores

    async def search(self, project: str, store_ids: Sequence[str], texts: Sequence[str], where: Filter | None,
                     limit: int, rank: Ranking) -> list[SearchHit]:
        """The best `limit` chunks for the queries among the stores' files matching `where` (stores checked
        already, by `stores`)."""
        vector_lists, keyword_lists = [], []
        for text in texts:
            if rank.embedding_weight > 0:
                with tracing.span("embeddings", attributes={"gen_ai.operation.name": "embeddings",
                                                            "gen_ai.request.model": self.embeddings.model.name}):
                    vector = await self.embeddings.query_vector(text)
                with tracing.span("vector_search", attributes={"responses_server.vector_stores": len(store_ids)}):
                    vector_lists.append(await self.index.vector_search(project, store_ids, vector, where,
                                                                       CANDIDATES))
            if rank.text_weight > 0:
                with tracing.span("keyword_search", attributes={"responses_server.vector_stores": len(store_ids)}):
                    keyword_lists.append(await self.index.keyword_search(project, store_ids, words(text), where,
                                                                         CANDIDATES))
        if rank.text_weight == 0:
            scored = nearest(vector_lists)
        else:
            scored = fused([(ranked, rank.embedding_weight) for ranked in vector_lists]
                           + [(ranked, rank.text_weight) for ranked in keyword_lists])
        kept = [(chunk_id, round(score, 6)) for chunk_id, score in scored if score >= rank.score_threshold][:limit]
        return await self.index.hits(project, kept)
