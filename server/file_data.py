"""What an `input_file` part may carry: an uploaded file's id, or a base64 data URL of a type the server reads (text,
PDF) within its size; checked when the request is read, before anything is decoded."""

from __future__ import annotations

from server.data_urls import DataUrl

MAX_FILE_BYTES = 10 * 1024 * 1024
TEXT_TYPES = frozenset({"application/json", "application/xml", "application/x-yaml", "application/yaml",
                        "application/javascript", "application/x-sh", "application/toml", "application/sql"})
PDF = "application/pdf"


class FileError(ValueError):
    """A file part the server cannot read as text."""


def check_file(file_data: object, filename: object, file_id: object = None, file_url: object = None) -> None:
    """A FileError unless the part names an uploaded file (`file_id`) or a URL (`file_url`), each read when the
    prompt is made, or carries a base64 data URL of a type the server reads, within the size limit."""
    if file_data is None and any(isinstance(source, str) and source for source in (file_id, file_url)):
        return
    if not isinstance(file_data, str) or not file_data:
        raise FileError("an input_file needs file_id (an uploaded file), file_url (an http(s) URL the operator "
                        "allows) or file_data: a data URL (data:text/plain;base64,...) and a filename")
    mime = file_data_url(file_data).mime
    if mime != PDF and not mime.startswith("text/") and mime not in TEXT_TYPES:
        raise FileError(f"files of type {mime!r} are not supported: send text (text/*, JSON, YAML, ...) or a PDF")


def file_data_url(value: str) -> DataUrl:
    """A file part's `file_data` as a data URL, checked (not decoded): base64, within the size limit."""
    if not value.startswith("data:"):
        raise FileError("file_data must be a data URL (data:<type>;base64,...)")
    parsed = DataUrl.parse(value)
    if not parsed.base64:
        raise FileError("a file's data URL must be base64-encoded (data:<type>;base64,...)")
    if not parsed.fits(MAX_FILE_BYTES):
        raise FileError(f"the file is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB")
    return parsed
