"""Files sent in `input_file` parts, as the text the model reads: text types as they are, PDFs as their text."""

from __future__ import annotations

import io
import json

from server.attachments.data_urls import DataUrl, DataUrlError

MAX_FILE_BYTES = 10 * 1024 * 1024
TEXT_TYPES = frozenset({"application/json", "application/xml", "application/x-yaml", "application/yaml",
                        "application/javascript", "application/x-sh", "application/toml", "application/sql"})
PDF = "application/pdf"


class FileError(ValueError):
    """A file part the server cannot read as text."""


def file_text(file_data: object, filename: object) -> str:
    """The text a file part stands for in the prompt: its content between lines naming it."""
    if not isinstance(file_data, str) or not file_data:
        raise FileError("an input_file needs file_data: a data URL (data:text/plain;base64,...) and a filename; "
                        "file_id and file_url are not supported by this server")
    name = filename if isinstance(filename, str) and filename else "file"
    mime, data = _data_url(file_data)
    if mime == PDF:
        content = _pdf_text(data)
    elif mime.startswith("text/") or mime in TEXT_TYPES:
        try:
            content = data.decode("utf-8")
        except UnicodeDecodeError:
            raise FileError(f"the file {name!r} is not UTF-8 text") from None
    else:
        raise FileError(f"files of type {mime!r} are not supported: send text (text/*, JSON, YAML, ...) or a PDF")
    return f"\n<file name={json.dumps(name)}>\n{content}\n</file>\n"  # on lines of its own, named


def _data_url(value: str) -> tuple[str, bytes]:
    if not value.startswith("data:"):
        raise FileError("file_data must be a data URL (data:<type>;base64,...)")
    data_url = DataUrl.parse(value)
    if not data_url.base64:
        raise FileError("a file's data URL must be base64-encoded (data:<type>;base64,...)")
    try:
        return data_url.mime, data_url.decoded(MAX_FILE_BYTES)
    except DataUrlError as exc:
        raise FileError(f"the file {exc}") from None


def _pdf_text(data: bytes) -> str:
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
