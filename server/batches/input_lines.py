"""A batch's input file read and checked as OpenAI checks it: a JSON object a line, each with a `custom_id` of its
own, `method` POST, the batch's `url`, a `body` object, and one model for the whole batch, served here. Any problem
fails the batch, each named with its line (1-based) in the batch's `errors`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

from server.batches.batch import MAX_LINES

MOST_ERRORS = 100  # problems listed for one file (a file of a million bad lines says the first hundred)


@dataclass(frozen=True)
class InputLine:
    """One request of a batch: its place in the file (0-based), the client's id for it, and the request's body."""

    index: int
    custom_id: str
    body: dict[str, Any]


@dataclass(frozen=True)
class ReadLines:
    """The file's requests when it is valid; else `errors` (the SDK's BatchError each) and no request."""

    lines: list[InputLine]
    errors: list[dict[str, Any]]
    model: str | None = None


def read_lines(content: bytes, endpoint: str, served: Callable[[str], bool]) -> ReadLines:
    """The batch's requests from its input file; `served` tells whether this server serves a model."""
    errors: list[dict[str, Any]] = []
    lines: list[InputLine] = []
    seen: set[str] = set()
    model: str | None = None
    texts = [text for text in content.decode("utf-8", errors="replace").splitlines()]
    for number, text in enumerate(texts, start=1):
        if not text.strip():
            continue
        line, problem = _line(text, number, endpoint, seen)
        if problem is not None:
            errors.append(problem)
        elif line is not None:
            line_model = line.body.get("model")
            if model is None:
                model = line_model
            if line_model != model:
                errors.append(_error("mismatched_model", number, "The provided model differs from the other "
                                     f"requests' ('{model}'): a batch runs one model.", "body.model"))
            lines.append(InputLine(len(lines), line.custom_id, line.body))
        if len(errors) >= MOST_ERRORS:
            break
    if not lines and not errors:
        errors.append(_error("empty_file", None, "The input file holds no request.", "input_file_id"))
    if len(lines) > MAX_LINES:
        errors.append(_error("too_many_tasks", None, f"A batch holds at most {MAX_LINES} requests.",
                             "input_file_id"))
    if model is not None and not errors and not served(model):
        errors.append(_error("model_not_found", 1, f"The model '{model}' is not served here.", "body.model"))
    return ReadLines([] if errors else lines, errors, model)


def _line(text: str, number: int, endpoint: str, seen: set[str]) -> tuple[InputLine | None, dict[str, Any] | None]:
    try:
        request = json.loads(text)
    except ValueError:
        return None, _error("invalid_json_line", number, "This line is not parseable as valid JSON.")
    if not isinstance(request, dict):
        return None, _error("invalid_json_line", number, "This line is not a JSON object.")
    custom_id = request.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return None, _error("missing_required_parameter", number, "Each request needs a `custom_id` (a string).",
                            "custom_id")
    if custom_id in seen:
        return None, _error("duplicate_custom_id", number, "The custom_id for this request is a duplicate of "
                            "another request. The custom_id parameter must be unique for each request in a batch.",
                            "custom_id")
    seen.add(custom_id)
    if request.get("method") != "POST":
        return None, _error("invalid_method", number, "The method of a batch request must be POST.", "method")
    if request.get("url") != endpoint:
        return None, _error("invalid_url", number, f"The URL of this request does not match the batch's endpoint "
                            f"({endpoint}).", "url")
    body = request.get("body")
    if not isinstance(body, dict):
        return None, _error("invalid_request", number, "The request's `body` must be a JSON object.", "body")
    if not isinstance(body.get("model"), str):
        return None, _error("missing_required_parameter", number, "The request's body needs a `model`.",
                            "body.model")
    return InputLine(0, custom_id, body), None


def _error(code: str, line: int | None, message: str, param: str | None = None) -> dict[str, Any]:
    return {"code": code, "line": line, "message": message, "param": param}
