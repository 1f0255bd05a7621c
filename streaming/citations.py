"""Citations in an answer's text: a marker such as `[2]` that names a result a hosted search returned becomes a
`file_citation` annotation at the marker's place (the marker stays in the text: it has been streamed already)."""

from __future__ import annotations

import re
from typing import Any, Mapping

from streaming.items import Citable

_MARKER = re.compile(r"[\[【](\d{1,4})(?:[^\]】\n]{0,40})?[\]】]")  # [2], 【2】, or 【2†source】 as OpenAI's models write


def file_citations(text: str, sources: Mapping[int, Citable]) -> list[dict[str, Any]]:
    """The SDK's `AnnotationFileCitation`s of the markers in `text` that name a known result, in text order; `index`
    is the marker's place in characters."""
    annotations = []
    for match in _MARKER.finditer(text):
        source = sources.get(int(match.group(1)))
        if source is not None:
            annotations.append({"type": "file_citation", "file_id": source.file_id, "filename": source.filename,
                                "index": match.start()})
    return annotations
