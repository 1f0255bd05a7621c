"""Files sent in `input_file` parts, as the text the model reads: text types as they are, PDFs as their text.

A part is checked when the request is read (cheap: its data URL and type, server/file_data.py); its text is read before the prompt is
rendered, a PDF's in the work pool (off the event loop, within its time and memory limits), and kept by content
so that the turns after it do not read it again.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections import OrderedDict
from typing import TYPE_CHECKING, Awaitable, Callable

from server.data_urls import DataUrlError
from server.attachments.work_pool import WorkPool, WorkTooCostly
from server.errors import RequestError, TooLarge
from server.file_data import MAX_FILE_BYTES, PDF, FileError, file_data_url

if TYPE_CHECKING:  # requests import this module (to check file parts as they are read)
    from server.requests import ResponsesRequest

_KEPT_TEXTS = 256  # files' texts kept by content, the most recently used


class FileTexts:
    """Files' texts by content (the most recent _KEPT_TEXTS), read in `pool` where reading costs."""

    def __init__(self, pool: WorkPool) -> None:
        self._pool = pool
        self._kept: OrderedDict[str, str] = OrderedDict()

    async def text(self, file_data: str, filename: object, param: str) -> str:
        """The text a file part stands for in the prompt: its content between lines naming it; a RequestError
        naming `param` when it cannot be read."""
        key = hashlib.sha256(file_data.encode("utf-8", "surrogatepass")).hexdigest()
        return await self._kept_text(key, filename, param, lambda: self._read(file_data))

    async def stored_text(self, data: bytes, filename: object, param: str) -> str:
        """The same, for an uploaded file's content: a PDF by its signature, else UTF-8 text."""
        key = "stored:" + hashlib.sha256(data).hexdigest()
        return await self._kept_text(key, filename, param, lambda: self._text(PDF if data[:5] == b"%PDF-" else
                                                                              "text/plain", data))

    async def _kept_text(self, key: str, filename: object, param: str, read: Callable[[], Awaitable[str]]) -> str:
        name = filename if isinstance(filename, str) and filename else "file"
        if key not in self._kept:
            try:
                self._kept[key] = await read()
            except FileError as exc:
                raise RequestError(f"Invalid input_file: {exc}.", param=param) from None
            except WorkTooCostly as exc:
                raise _too_costly(exc, param) from None
            while len(self._kept) > _KEPT_TEXTS:
                self._kept.popitem(last=False)
        self._kept.move_to_end(key)
        return f"\n<file name={json.dumps(name)}>\n{self._kept[key]}\n</file>\n"  # on lines of its own, named

    async def _read(self, file_data: str) -> str:
        data_url = file_data_url(file_data)
        try:
            data = data_url.decoded(MAX_FILE_BYTES)
        except DataUrlError as exc:
            raise FileError(f"the file {exc}") from None
        return await self._text(data_url.mime, data)

    async def _text(self, mime: str, data: bytes) -> str:
        if mime == PDF:
            return await self._pool.run(pdf_text, data)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise FileError("the file is not UTF-8 text") from None


def _too_costly(exc: WorkTooCostly, param: str) -> RequestError:
    if exc.kind == "time":
        return RequestError("The file took longer to read than this server allows; send its text instead.",
                            param=param, code="file_too_costly")
    return TooLarge("The file needs more memory to read than this server allows; send its text instead.",
                    param=param, code="file_too_large")


def pdf_text(data: bytes) -> str:
    """A PDF's text, page after page (run in the work pool: pypdf is pure Python and unbounded in time)."""
    from pypdf import PdfReader

    try:
        reader = PdfReader(io.BytesIO(data))
        pages = [page.extract_text() or "" for page in reader.pages]
    except Exception:  # pypdf raises PdfReadError, ValueError, KeyError, ... on broken files
        raise FileError("the PDF could not be read") from None
    text = "\n\n".join(page.strip() for page in pages if page.strip())
    if not text:
        raise FileError("the PDF has no text to read (a scanned PDF needs OCR, which this server does not do)")
    return text



# An uploaded file's (filename, content) by its id, for the request's project (None: it has no such file); a
# FileError when it is too large to read.
LoadFile = Callable[[str], Awaitable[tuple[str, bytes] | None]]
# A file URL's bytes (url, param), fetched under the operator's guards; a RequestError naming param when it cannot be.
FetchFile = Callable[[str, str], Awaitable[bytes]]


async def read_files(request: "ResponsesRequest", body: "ResponsesRequest", texts: FileTexts,
                     load: LoadFile | None = None, fetch: FetchFile | None = None) -> None:
    """Every input_file part of `request` (the conversation) read into the text the model sees; a RequestError
    naming the part (in `body`, the request as sent, else the history's) when one cannot be read. A part naming an
    uploaded file by `file_id` is read through `load`, one naming a URL by `file_url` through `fetch`."""
    params = {_source(part): param for param, part in body.content_parts() if part.type == "input_file"}
    for _, part in request.content_parts():
        if part.type != "input_file":
            continue
        file_data, file_id = getattr(part, "file_data", None), getattr(part, "file_id", None)
        file_url = getattr(part, "file_url", None)
        param = params.get(_source(part), "previous_response_id")
        if file_data is None and isinstance(file_id, str) and file_id:
            part.read_as(await _uploaded_text(texts, load, file_id, getattr(part, "filename", None), param))
            continue
        if file_data is None and isinstance(file_url, str) and file_url:
            if fetch is None:
                raise RequestError("This server fetches no file URLs here; send the file as file_data.", param=param)
            name = getattr(part, "filename", None) or file_url.rstrip("/").rsplit("/", 1)[-1]
            part.read_as(await texts.stored_text(await fetch(file_url, f"{param}.file_url"), name, param))
            continue
        if not isinstance(file_data, str):
            raise RequestError("Invalid input_file: it needs file_data or file_id.", param=param)
        part.read_as(await texts.text(file_data, getattr(part, "filename", None), param))


def _source(part: object) -> object:
    return getattr(part, "file_data", None) or getattr(part, "file_id", None) or getattr(part, "file_url", None)


async def uploaded(load: LoadFile | None, file_id: str, param: str, part_type: str) -> tuple[str, bytes]:
    """The (filename, content) of the project's uploaded file `file_id`, named by a part of `part_type` at `param`; a
    RequestError naming the part's file_id when there is no such file (another project's is exactly a missing one)."""
    try:
        found = await load(file_id) if load is not None else None
    except FileError as exc:
        raise RequestError(f"Invalid {part_type}: {exc}.", param=param) from None
    if found is None:
        raise RequestError(f"No file with id '{file_id}' found.", param=f"{param}.file_id",
                           code="file_not_found")
    return found


async def _uploaded_text(texts: FileTexts, load: LoadFile | None, file_id: str, filename: object, param: str) -> str:
    name, data = await uploaded(load, file_id, param, "input_file")
    return await texts.stored_text(data, filename or name, param)
