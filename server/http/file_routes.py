"""The `/v1/files` routes: upload (multipart, kept in the database a part at a time), list, retrieve, content, delete."""

from __future__ import annotations

from typing import Annotated, Any, AsyncIterator, Iterator, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import StreamingResponse
from starlette.datastructures import UploadFile

from server.http.context import required_files, serving_context
from server.http.errors import APIError
from server.retrieval.files import PART_BYTES, StoredFile, checked_purpose, expires_at, new_file_id
from server.retrieval.project_files import ProjectFiles

router = APIRouter()
UPLOAD_OVERHEAD = 64 * 1024  # a multipart body's bytes besides the file: boundaries, headers, the other fields


@router.post("/v1/files")
async def upload_file(request: Request) -> dict[str, Any]:
    store, context = required_files(request), serving_context(request)
    async with request.form(max_files=1, max_fields=8) as form:
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise APIError("A file is required: send it as the multipart field 'file'.", status=400, param="file")
        purpose = checked_purpose(form.get("purpose"))
        created_at = int(context.clock())
        until = expires_at(form.get("expires_after[anchor]"), form.get("expires_after[seconds]"), created_at)
        size = upload.size if upload.size is not None else 0
        if size > context.config.max_file_bytes:
            raise APIError(f"The file is larger than this server accepts ({context.config.max_file_bytes} bytes).",
                           status=413, param="file", code="file_too_large")
        record = StoredFile(new_file_id(), store.project, upload.filename or "file", purpose, size, created_at, until)
        await upload.seek(0)
        await store.save_file(record, _parts(upload))
    return record.to_api()


def _parts(upload: UploadFile) -> Iterator[bytes]:
    """The upload's content a part at a time, read from its spooled file as the store writes it."""
    while part := upload.file.read(PART_BYTES):
        yield part


class FilesQuery:
    """The list route's query."""

    def __init__(self, after: str | None = None, limit: int = Query(default=10_000, ge=1, le=10_000),
                 order: Literal["asc", "desc"] = "desc", purpose: str | None = None) -> None:
        self.after, self.limit, self.order, self.purpose = after, limit, order, purpose


@router.get("/v1/files")
async def list_files(request: Request, query: Annotated[FilesQuery, Depends()]) -> dict[str, Any]:
    files, has_more = await required_files(request).list_files(query.purpose, query.after, query.limit, query.order)
    return {"object": "list", "data": [file.to_api() for file in files], "has_more": has_more,
            "first_id": files[0].id if files else None, "last_id": files[-1].id if files else None}


async def _file(store: ProjectFiles, file_id: str) -> StoredFile:
    record = await store.get_file(file_id)
    if record is None:
        raise APIError(f"No such File object: {file_id}", status=404, type="invalid_request_error", param="id")
    return record


@router.get("/v1/files/{file_id}")
async def retrieve_file(request: Request, file_id: str) -> dict[str, Any]:
    return (await _file(required_files(request), file_id)).to_api()


@router.get("/v1/files/{file_id}/content")
async def file_content(request: Request, file_id: str) -> StreamingResponse:
    store = required_files(request)
    record = await _file(store, file_id)

    async def parts() -> AsyncIterator[bytes]:
        position = 0
        while (part := await store.file_part(file_id, position)) is not None:
            yield part
            position += 1

    return StreamingResponse(parts(), media_type="application/octet-stream",
                             headers={"content-length": str(record.bytes)})


@router.delete("/v1/files/{file_id}")
async def delete_file(request: Request, file_id: str) -> dict[str, Any]:
    store = required_files(request)
    if not await store.delete_file(file_id):
        raise APIError(f"No such File object: {file_id}", status=404, type="invalid_request_error", param="id")
    return {"id": file_id, "object": "file", "deleted": True}


def upload_limits(max_file_bytes: int) -> dict[tuple[str, str], int]:
    """The body limit of the upload route (BodySizeLimit's `uploads`)."""
    return {("POST", "/v1/files"): max_file_bytes + UPLOAD_OVERHEAD}
