"""Log lines that name their request: every line written while a response is served carries its trace and span ids,
its response id and its project; as text (the default) or as JSON lines (`--log-format json`)."""

from __future__ import annotations

import json
import logging
import time
from contextvars import ContextVar

from server import tracing

_RESPONSE: ContextVar[tuple[str, str] | None] = ContextVar("responses_server_response", default=None)
_FIELDS = ("trace_id", "span_id", "response_id", "project")
TEXT_FORMAT = "%(levelname)s %(name)s: %(message)s"


def name_request(response_id: str, project: str) -> None:
    """The response (and its project) the lines logged from here on in this task are about."""
    _RESPONSE.set((response_id, project))


class RequestFields(logging.Filter):
    """Adds the request's fields to each record (None outside a request)."""

    def filter(self, record: logging.LogRecord) -> bool:
        ids = tracing.current_ids()
        named = _RESPONSE.get()
        record.trace_id, record.span_id = ids if ids is not None else (None, None)
        record.response_id, record.project = named if named is not None else (None, None)
        return True


class TextLines(logging.Formatter):
    """`LEVEL logger: message`, then the request's fields it has, as `name=value`."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(f"{name}={getattr(record, name)}" for name in _FIELDS if getattr(record, name, None))
        line = super().format(record)
        return f"{line} [{fields}]" if fields else line


class JsonLines(logging.Formatter):
    """One JSON object a line: time, level, logger, message, the request's fields, and an exception's traceback."""

    def format(self, record: logging.LogRecord) -> str:
        line = {"time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
                "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        line.update({name: getattr(record, name) for name in _FIELDS if getattr(record, name, None)})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def configure(log_format: str = "text", level: int = logging.INFO) -> None:
    """The root logger writes to stderr in `log_format` ("text" or "json"), each line with its request's fields."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonLines() if log_format == "json" else TextLines())
    handler.addFilter(RequestFields())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
