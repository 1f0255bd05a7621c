"""Documents into chunks: a file's pages as text, cut into spans of tokens of the embedding model's tokenizer (with
overlap), each kept as the exact text it covers, its pages and its place, and the prompts that embed it.

Run in the work pool (pypdf and a long document's tokenization are CPU work): module-level functions of picklable
arguments, the tokenizer loaded once per worker.
"""

from __future__ import annotations

import io
from array import array
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from server.file_data import FileError
from server.errors import RequestError

AUTO_MAX_TOKENS, AUTO_OVERLAP = 800, 400  # OpenAI's `auto` strategy
STATIC_MAX_TOKENS = (100, 4096)  # the range OpenAI allows for `max_chunk_size_tokens`
PAGE_BREAK = "\n\n"
SEGMENT_CHARS = 32 * 1024  # the text tokenized in one call
MAX_TEXT_CHARS = 16 << 20  # a file's text, at most (its tokens and chunks are held at once: ~2 GB at this size)


@dataclass(frozen=True)
class ChunkingStrategy:
    """How a file is cut: at most `max_tokens` a chunk, each overlapping the one before by `overlap` tokens."""

    kind: Literal["auto", "static"] = "auto"
    max_tokens: int = AUTO_MAX_TOKENS
    overlap: int = AUTO_OVERLAP

    def to_api(self) -> dict[str, Any]:
        """As a vector store file shows it (OpenAI shows `auto` as the static strategy it stands for)."""
        return {"type": "static", "static": {"max_chunk_size_tokens": self.max_tokens,
                                             "chunk_overlap_tokens": self.overlap}}


def chunking_strategy(value: object, param: str = "chunking_strategy") -> ChunkingStrategy:
    """The request's `chunking_strategy` (absent: auto), checked as OpenAI checks it."""
    if value is None:
        return ChunkingStrategy()
    if not isinstance(value, dict) or value.get("type") not in ("auto", "static"):
        raise RequestError("chunking_strategy must be {'type': 'auto'} or {'type': 'static', 'static': {...}}.",
                           param=param)
    if value["type"] == "auto":
        return ChunkingStrategy()
    static = value.get("static")
    if not isinstance(static, dict):
        raise RequestError("A static chunking_strategy needs 'static': {'max_chunk_size_tokens', "
                           "'chunk_overlap_tokens'}.", param=f"{param}.static")
    size, overlap = static.get("max_chunk_size_tokens"), static.get("chunk_overlap_tokens")
    low, high = STATIC_MAX_TOKENS
    if type(size) is not int or not low <= size <= high:
        raise RequestError(f"max_chunk_size_tokens must be a whole number from {low} to {high}.",
                           param=f"{param}.static.max_chunk_size_tokens")
    if type(overlap) is not int or not 0 <= overlap <= size // 2:
        raise RequestError("chunk_overlap_tokens must be a whole number from 0 to half of max_chunk_size_tokens.",
                           param=f"{param}.static.chunk_overlap_tokens")
    return ChunkingStrategy("static", size, overlap)


@dataclass(frozen=True)
class Chunk:
    """A span of a document: its text, where it is (characters, tokens, pages), and the prompts that embed it (each
    at most the embedding model's window, special tokens included)."""

    position: int  # 0, 1, ... within the document
    text: str
    chars: tuple[int, int]  # [start, end) in the document's text
    tokens: tuple[int, int]  # [start, end) in the document's tokens
    pages: tuple[int, int] | None  # first and last page (from 1), for a paged document (a PDF)
    prompts: tuple[tuple[int, ...], ...]

    def attributes(self) -> dict[str, int]:
        """Where the chunk is, as a search result's attributes show it."""
        where = {"chunk_index": self.position, "char_start": self.chars[0], "char_end": self.chars[1]}
        if self.pages is not None:
            where |= {"page_start": self.pages[0], "page_end": self.pages[1]}
        return where


def document_pages(data: bytes, filename: str) -> tuple[list[str], bool]:
    """A file's text by page (one page for a text file), and whether it has pages (a PDF); a FileError when it
    cannot be read as text."""
    if data.startswith(b"%PDF") or filename.lower().endswith(".pdf"):
        return _pdf_pages(data), True
    try:
        return [data.decode("utf-8")], False
    except UnicodeDecodeError:
        raise FileError("the file is neither UTF-8 text nor a PDF") from None


def _pdf_pages(data: bytes) -> list[str]:
    from pypdf import PdfReader

    try:
        pages = [page.extract_text() or "" for page in PdfReader(io.BytesIO(data)).pages]
    except Exception:  # pypdf raises PdfReadError, ValueError, KeyError, ... on broken files
        raise FileError("the PDF could not be read") from None
    if not any(page.strip() for page in pages):
        raise FileError("the PDF has no text to read (a scanned PDF needs OCR, which this server does not do)")
    return pages


def file_chunks(data: bytes, filename: str, strategy: ChunkingStrategy, tokenizer: str,
                window: int) -> list[Chunk]:
    """The chunks of a file (read in the work pool): its pages' text joined by blank lines, cut by `strategy` in
    tokens of the tokenizer at `tokenizer`, each embedded in prompts of at most `window` tokens."""
    pages, paged = document_pages(data, filename)
    if sum(len(page) for page in pages) > MAX_TEXT_CHARS:
        raise FileError(f"its text is longer than this server ingests ({MAX_TEXT_CHARS >> 20} Mi characters)")
    return document_chunks(pages, paged, strategy, _tokenizer(tokenizer), window)


def document_chunks(pages: list[str], paged: bool, strategy: ChunkingStrategy, tokenizer: Any,
                    window: int) -> list[Chunk]:
    """The chunks of a document given as its pages' texts (pure: the tokenizer is given)."""
    text, page_starts = _joined(pages)
    ids, offsets = encoded(text, tokenizer)
    wrap = special_tokens(tokenizer)
    piece = window - len(wrap.before) - len(wrap.after)
    step = strategy.max_tokens - strategy.overlap
    chunks: list[Chunk] = []
    for start in range(0, max(len(ids) - strategy.overlap, 1), step):
        end = min(start + strategy.max_tokens, len(ids))
        if end <= start:
            break
        chars = (offsets[start][0], offsets[end - 1][1])
        prompts = tuple(wrap.around(ids[at:min(at + piece, end)].tolist()) for at in range(start, end, piece))
        pages_of = (_page(page_starts, chars[0]), _page(page_starts, max(chars[1] - 1, chars[0]))) if paged else None
        chunks.append(Chunk(len(chunks), text[chars[0]:chars[1]], chars, (start, end), pages_of, prompts))
    return chunks


def encoded(text: str, tokenizer: Any) -> tuple[array, list[tuple[int, int]]]:
    """The text's token ids and each token's [start, end) in characters, tokenized SEGMENT_CHARS at a time, each
    segment ending at whitespace (a word-piece or byte-level tokenizer cuts there anyway): one call on a long text
    costs more than linear time and memory (5.2 MB of text: 18.8 s and 1.2 GB in one call, 10.9 s and 0.7 GB in
    segments, in a process of its own)."""
    ids: array = array("l")
    offsets: list[tuple[int, int]] = []
    start = 0
    while start < len(text):
        end = min(start + SEGMENT_CHARS, len(text))
        if end < len(text):
            cut = max(text.rfind(" ", start, end), text.rfind("\n", start, end))
            end = cut + 1 if cut > start else end
        encoding = tokenizer(text[start:end], add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        ids.extend(encoding["input_ids"])
        offsets += [(first + start, last + start) for first, last in encoding["offset_mapping"]]
        start = end
    return ids, offsets


def _joined(pages: list[str]) -> tuple[str, list[int]]:
    """The pages' texts joined by blank lines, and where each page starts."""
    starts, at = [], 0
    for page in pages:
        starts.append(at)
        at += len(page) + len(PAGE_BREAK)
    return PAGE_BREAK.join(pages), starts


def _page(starts: list[int], char: int) -> int:
    """The page (from 1) holding character `char`."""
    page = 1
    for number, start in enumerate(starts, 1):
        if start <= char:
            page = number
    return page


@lru_cache(maxsize=2)
def _tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def query_prompts(query: str, tokenizer: Any, window: int) -> list[tuple[int, ...]]:
    """The prompts that embed a query: one, or one per window of a query longer than the model reads."""
    ids = tokenizer(query, add_special_tokens=False, verbose=False)["input_ids"] or []
    wrap = special_tokens(tokenizer)
    piece = window - len(wrap.before) - len(wrap.after)
    return [wrap.around(ids[at:at + piece]) for at in range(0, max(len(ids), 1), piece)]


@dataclass(frozen=True)
class SpecialTokens:
    """The tokens a tokenizer puts before and after a text it encodes (BERT's [CLS] and [SEP])."""

    before: tuple[int, ...]
    after: tuple[int, ...]

    def around(self, ids: list[int]) -> tuple[int, ...]:
        return (*self.before, *ids, *self.after)


def special_tokens(tokenizer: Any) -> SpecialTokens:
    """What the tokenizer adds around a text, found by encoding one word with and without its special tokens."""
    bare = tokenizer("a", add_special_tokens=False)["input_ids"]
    whole = tokenizer("a", add_special_tokens=True)["input_ids"]
    at = next(index for index in range(len(whole) - len(bare) + 1) if whole[index:index + len(bare)] == bare)
    return SpecialTokens(tuple(whole[:at]), tuple(whole[at + len(bare):]))
