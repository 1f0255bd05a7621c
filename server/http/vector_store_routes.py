"""The `/v1/vector_stores` routes: stores, their files and file batches, and search (server/retrieval)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request

from server.errors import RequestError
from server.http.bodies import json_object
from server.http.context import required_retrieval
from server.retrieval.chunking import chunking_strategy
from server.retrieval.filters import checked_filter
from server.retrieval.index import FilesQuery
from server.retrieval.project import MAX_BATCH_FILES, FileToAdd, ProjectRetrieval
from server.retrieval.search import max_results, queries, ranking
from server.retrieval.vector_stores import (FILE_STATUSES, FileStatus, StoreFile, checked_attributes,
                                            checked_expiry, checked_metadata)

router = APIRouter()


class ListQuery:
    """A list route's query: after an id, at most `limit`, in `order`."""

    def __init__(self, after: str | None = None, limit: int = Query(default=20, ge=1, le=100),
                 order: Literal["asc", "desc"] = "desc") -> None:
        self.after, self.limit, self.order = after, limit, order


def _page(items: list[Any], has_more: bool, ids: list[str]) -> dict[str, Any]:
    return {"object": "list", "data": items, "has_more": has_more, "first_id": ids[0] if ids else None,
            "last_id": ids[-1] if ids else None}


@router.post("/v1/vector_stores")
async def create_store(request: Request) -> dict[str, Any]:
    retrieval, body = required_retrieval(request), await json_object(request, empty={})
    name = body.get("name") or ""
    if not isinstance(name, str):
        raise RequestError("name must be a string.", param="name")
    description = body.get("description")
    if description is not None and not isinstance(description, str):
        raise RequestError("description must be a string.", param="description")
    file_ids = body.get("file_ids") or []
    if not isinstance(file_ids, list) or not all(isinstance(item, str) for item in file_ids):
        raise RequestError("file_ids must be a list of file ids.", param="file_ids")
    strategy = chunking_strategy(body.get("chunking_strategy"))
    store = await retrieval.create_store(name, description, checked_metadata(body.get("metadata")),
                                         checked_expiry(body.get("expires_after")))
    if file_ids:
        await retrieval.add_files(store, [FileToAdd(file_id, {}, strategy) for file_id in file_ids], batched=False)
    return (await retrieval.store(store.id)).to_api(int(retrieval.clock()))


@router.get("/v1/vector_stores")
async def list_stores(request: Request, query: Annotated[ListQuery, Depends()]) -> dict[str, Any]:
    retrieval = required_retrieval(request)
    stores, has_more = await retrieval.list_stores(query.after, query.limit, query.order)
    now = int(retrieval.clock())
    return _page([store.to_api(now) for store in stores], has_more, [store.id for store in stores])


@router.get("/v1/vector_stores/{store_id}")
async def retrieve_store(request: Request, store_id: str) -> dict[str, Any]:
    retrieval = required_retrieval(request)
    return (await retrieval.store(store_id)).to_api(int(retrieval.clock()))


@router.post("/v1/vector_stores/{store_id}")
async def update_store(request: Request, store_id: str) -> dict[str, Any]:
    retrieval, body = required_retrieval(request), await json_object(request, empty={})
    changes: dict[str, Any] = {}
    if body.get("name") is not None:
        if not isinstance(body["name"], str):
            raise RequestError("name must be a string.", param="name")
        changes["name"] = body["name"]
    if "metadata" in body:
        changes["metadata"] = checked_metadata(body["metadata"])
    if "expires_after" in body:
        changes["expires_after_days"] = checked_expiry(body["expires_after"])
    store = await retrieval.update_store(store_id, changes)
    return store.to_api(int(retrieval.clock()))


@router.delete("/v1/vector_stores/{store_id}")
async def delete_store(request: Request, store_id: str) -> dict[str, Any]:
    await required_retrieval(request).delete_store(store_id)
    return {"id": store_id, "object": "vector_store.deleted", "deleted": True}


@router.post("/v1/vector_stores/{store_id}/search")
async def search(request: Request, store_id: str) -> dict[str, Any]:
    retrieval, body = required_retrieval(request), await json_object(request)
    texts = queries(body.get("query"))
    if body.get("rewrite_query") not in (None, False, True):
        raise RequestError("rewrite_query must be a boolean.", param="rewrite_query")
    hits = await retrieval.search([store_id], texts, checked_filter(body.get("filters")),
                                  max_results(body.get("max_num_results")), ranking(body.get("ranking_options")))
    return {"object": "vector_store.search_results.page", "search_query": texts,
            "data": [hit.to_api() for hit in hits], "has_more": False, "next_page": None}


# -- files --------------------------------------------------------------------------------------------------------


@router.post("/v1/vector_stores/{store_id}/files")
async def add_file(request: Request, store_id: str) -> dict[str, Any]:
    retrieval, body = required_retrieval(request), await json_object(request)
    file_id = body.get("file_id")
    if not isinstance(file_id, str) or not file_id:
        raise RequestError("file_id is required.", param="file_id")
    store = await retrieval.store(store_id)
    adding = FileToAdd(file_id, checked_attributes(body.get("attributes")), chunking_strategy(body.get("chunking_strategy")))
    added, _ = await retrieval.add_files(store, [adding], batched=False)
    return added[0].to_api()


class FilesListQuery(ListQuery):
    """A files list route's query: also a status (`filter`)."""

    def __init__(self, after: str | None = None, limit: int = Query(default=20, ge=1, le=100),
                 order: Literal["asc", "desc"] = "desc", filter: str | None = None) -> None:
        super().__init__(after, limit, order)
        if filter is not None and filter not in FILE_STATUSES:
            raise RequestError(f"filter must be one of: {', '.join(FILE_STATUSES)}.", param="filter")
        self.status: FileStatus | None = filter  # type: ignore[assignment]


def _files_page(files: list[StoreFile], has_more: bool) -> dict[str, Any]:
    return _page([file.to_api() for file in files], has_more, [file.file_id for file in files])


@router.get("/v1/vector_stores/{store_id}/files")
async def list_files(request: Request, store_id: str, query: Annotated[FilesListQuery, Depends()]) -> dict[str, Any]:
    files, has_more = await required_retrieval(request).list_files(
        store_id, FilesQuery(None, query.status, query.after, query.limit, query.order))
    return _files_page(files, has_more)


@router.get("/v1/vector_stores/{store_id}/files/{file_id}")
async def retrieve_file(request: Request, store_id: str, file_id: str) -> dict[str, Any]:
    return (await required_retrieval(request).file(store_id, file_id)).to_api()


@router.get("/v1/vector_stores/{store_id}/files/{file_id}/content")
async def file_content(request: Request, store_id: str, file_id: str) -> dict[str, Any]:
    """The file's text as the store read it (the SDK's `files.content`: one page of one text part)."""
    text = await required_retrieval(request).file_text(store_id, file_id)
    return {"object": "vector_store.file_content.page", "data": [{"type": "text", "text": text}],
            "has_more": False, "next_page": None}


@router.post("/v1/vector_stores/{store_id}/files/{file_id}")
async def update_file(request: Request, store_id: str, file_id: str) -> dict[str, Any]:
    retrieval, body = required_retrieval(request), await json_object(request)
    if "attributes" not in body:
        raise RequestError("attributes is required.", param="attributes")
    return (await retrieval.update_attributes(store_id, file_id, checked_attributes(body["attributes"]))).to_api()


@router.delete("/v1/vector_stores/{store_id}/files/{file_id}")
async def delete_file(request: Request, store_id: str, file_id: str) -> dict[str, Any]:
    await required_retrieval(request).delete_file(store_id, file_id)
    return {"id": file_id, "object": "vector_store.file.deleted", "deleted": True}


# -- file batches ---------------------------------------------------------------------------------------------------


@router.post("/v1/vector_stores/{store_id}/file_batches")
async def create_batch(request: Request, store_id: str) -> dict[str, Any]:
    retrieval, body = required_retrieval(request), await json_object(request)
    store = await retrieval.store(store_id)
    batch = await retrieval.add_files(store, _batch_files(body), batched=True)
    assert batch[1] is not None
    return (await retrieval.batch(store_id, batch[1].id)).to_api()


def _batch_files(body: dict[str, Any]) -> list[FileToAdd]:
    """`file_ids` with the batch's attributes and chunking, or `files` each with its own."""
    if ("file_ids" in body) == ("files" in body):
        raise RequestError("Give either file_ids or files.", param="file_ids")
    if "file_ids" in body:
        ids = body["file_ids"]
        if not isinstance(ids, list) or not ids or not all(isinstance(item, str) and item for item in ids):
            raise RequestError("file_ids must be a non-empty list of file ids.", param="file_ids")
        attributes, strategy = checked_attributes(body.get("attributes")), chunking_strategy(body.get("chunking_strategy"))
        files = [FileToAdd(file_id, attributes, strategy) for file_id in ids]
    else:
        items = body["files"]
        if not isinstance(items, list) or not items:
            raise RequestError("files must be a non-empty list.", param="files")
        files = [_batch_file(item, f"files[{index}]") for index, item in enumerate(items)]
    if len(files) > MAX_BATCH_FILES:
        raise RequestError(f"A batch may hold at most {MAX_BATCH_FILES} files.", param="file_ids")
    return files


def _batch_file(item: object, param: str) -> FileToAdd:
    if not isinstance(item, dict) or not isinstance(item.get("file_id"), str) or not item["file_id"]:
        raise RequestError("Each of files needs a file_id.", param=f"{param}.file_id")
    return FileToAdd(item["file_id"], checked_attributes(item.get("attributes"), f"{param}.attributes"),
                     chunking_strategy(item.get("chunking_strategy"), f"{param}.chunking_strategy"))


@router.get("/v1/vector_stores/{store_id}/file_batches/{batch_id}")
async def retrieve_batch(request: Request, store_id: str, batch_id: str) -> dict[str, Any]:
    return (await required_retrieval(request).batch(store_id, batch_id)).to_api()


@router.post("/v1/vector_stores/{store_id}/file_batches/{batch_id}/cancel")
async def cancel_batch(request: Request, store_id: str, batch_id: str) -> dict[str, Any]:
    return (await required_retrieval(request).cancel_batch(store_id, batch_id)).to_api()


@router.get("/v1/vector_stores/{store_id}/file_batches/{batch_id}/files")
async def list_batch_files(request: Request, store_id: str, batch_id: str,
                           query: Annotated[FilesListQuery, Depends()]) -> dict[str, Any]:
    retrieval = required_retrieval(request)
    await retrieval.batch(store_id, batch_id)
    files, has_more = await retrieval.list_files(
        store_id, FilesQuery(batch_id, query.status, query.after, query.limit, query.order))
    return _files_page(files, has_more)
