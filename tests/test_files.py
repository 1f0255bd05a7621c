"""`input_file` parts: text files and PDFs put into the prompt as their text with their name; a clear 400 for
anything else; stored as sent."""

from __future__ import annotations

import base64
from typing import Any, Iterator

import httpx
import pytest

from server.config import ServerConfig
from server.http.app import create_app
from server.runs.context import ServingContext
from tests.conftest import serve_in_thread
from tests.hostile import pdf_file
from tests.scripted_engine import ScriptedEngine, steps_from_tokens

MODEL = "m"


def data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode()


def pdf(text: str) -> bytes:
    """A one-page PDF showing `text` (written by hand: objects, a content stream, the cross-reference table)."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    return pdf_file([b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
                     b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
                     b"/Resources << /Font << /F1 5 0 R >> >> >>",
                     b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
                     b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"])


@pytest.fixture(scope="module")
def served(tokenizer: Any) -> Iterator[tuple[ScriptedEngine, str]]:
    answer = steps_from_tokens(tokenizer.encode("Done.", add_special_tokens=False), cuts=[1])
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[answer])
    context = ServingContext(config=ServerConfig(served_model_name=MODEL), engine_factory=lambda: engine)
    with serve_in_thread(create_app(context)) as base_url:
        yield engine, base_url


def _post(base_url: str, part: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{base_url}/responses", timeout=30, json={"model": MODEL, "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "Read this."}, part]}]})


@pytest.mark.parametrize(("mime", "data", "expected"), [
    ("text/plain", "plain words\nsecond line".encode(), "plain words\nsecond line"),
    ("text/markdown", "# Título\n- ünïcode".encode(), "# Título\n- ünïcode"),
    ("application/json", b'{"a": [1, 2]}', '{"a": [1, 2]}'),
    ("application/pdf", pdf("Quarterly revenue grew"), "Quarterly revenue grew"),
], ids=["text", "markdown", "json", "pdf"])
def test_a_file_is_read_into_the_prompt_with_its_name(served: tuple[ScriptedEngine, str], tokenizer: Any,
                                                      mime: str, data: bytes, expected: str) -> None:
    engine, base_url = served
    response = _post(base_url, {"type": "input_file", "filename": "report.x", "file_data": data_url(mime, data)})
    assert response.status_code == 200, response.text
    prompt = tokenizer.decode(engine.requests[-1].prompt_token_ids)
    assert f'<file name="report.x">\n{expected}\n</file>' in prompt


@pytest.mark.parametrize(("part", "message"), [
    ({"file_data": data_url("application/zip", b"PK\x03\x04")}, "not supported"),
    ({"file_data": data_url("text/plain", b"\xff\xfe\x00bad")}, "not UTF-8"),
    ({"file_data": "data:text/plain;base64,@@@"}, "not valid base64"),
    ({"file_data": data_url("application/pdf", b"%PDF-1.4 garbage")}, "PDF"),
    ({"file_id": "file-abc"}, "No file with id"),  # no uploaded file of that id (tests/test_files_api.py)
    ({"file_url": "https://example.com/a.pdf"}, "does not fetch files from 'example.com'"),
], ids=["zip", "not-utf8", "bad-base64", "broken-pdf", "file-id", "file-url"])
def test_a_file_the_server_cannot_read_is_a_400_naming_its_part(served: tuple[ScriptedEngine, str],
                                                                part: dict[str, Any], message: str) -> None:
    _, base_url = served
    response = _post(base_url, {"type": "input_file", "filename": "f", **part})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"].startswith("input[0].content[1]") and message in error["message"]


def _file_host() -> Any:
    """An HTTP server with files to fetch (and a redirect, one too large)."""
    from starlette.applications import Starlette
    from starlette.responses import RedirectResponse, Response
    from starlette.routing import Route

    return Starlette(routes=[
        Route("/notes.txt", lambda _: Response(b"The launch code is 4417.", media_type="text/plain")),
        Route("/report.pdf", lambda _: Response(pdf("Quarterly revenue grew"), media_type="application/pdf")),
        Route("/moved.txt", lambda _: RedirectResponse("/notes.txt")),
        Route("/huge.txt", lambda _: Response(b"x" * (11 * 1024 * 1024), media_type="text/plain")),
    ])


def test_a_file_by_url_is_fetched_from_an_allowed_host_and_read_with_its_name(tokenizer: Any) -> None:
    """`file_url` under the image URLs' guards: only a host the operator allows, no redirect, a size limit; the
    text (a PDF's too) reaches the prompt named by the URL's last segment."""
    import openai

    answer = steps_from_tokens(tokenizer.encode("Done.", add_special_tokens=False), cuts=[1])
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[answer])
    config = ServerConfig(served_model_name=MODEL, allowed_media_domains=("127.0.0.1",))
    context = ServingContext(config=config, engine_factory=lambda: engine)
    with serve_in_thread(_file_host()) as files_at, serve_in_thread(create_app(context)) as base_url:
        files_at = files_at.removesuffix("/v1")
        client = openai.OpenAI(base_url=base_url, api_key="none", max_retries=0)
        response = client.responses.create(model=MODEL, input=[{"role": "user", "content": [
            {"type": "input_text", "text": "Read these."}, {"type": "input_file", "file_url": f"{files_at}/notes.txt"},
            {"type": "input_file", "file_url": f"{files_at}/report.pdf"}]}])
        assert response.status == "completed"
        prompt = tokenizer.decode(engine.requests[-1].prompt_token_ids)
        assert '<file name="notes.txt">\nThe launch code is 4417.\n</file>' in prompt
        assert "Quarterly revenue grew" in prompt
        for path, message in (("moved.txt", "answered HTTP 307"), ("huge.txt", "larger than 10 MiB")):
            refused = _post(base_url, {"type": "input_file", "file_url": f"{files_at}/{path}"})
            assert refused.status_code == 400 and message in refused.json()["error"]["message"], refused.text
            assert refused.json()["error"]["param"] == "input[0].content[1].file_url"
