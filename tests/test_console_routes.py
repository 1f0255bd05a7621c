"""What a browser reaches without a key on a server with keys: `/` leads to the console, whose pages, the API
reference (`/docs`) and the docs site (`/guide/`) are served by the server itself and name no other host; every
call they make still needs the key, which a browser's WebSocket offers as a subprotocol."""

from __future__ import annotations

import re
from typing import Any, Iterator

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from server.config import ServerConfig
from server.console.routes import DOCS_SITE
from server.http.app import create_app
from server.runs.context import ServingContext
from tests.conftest import serve_in_thread
from tests.scripted_engine import ScriptedEngine
from tests.test_server import MODEL

KEY = "console-key-0123456789abcdef"
ASSETS = re.compile(r"""(?:src=|<link[^>]*href=)["']([^"']+)["']""")  # what a page loads, not where it links


@pytest.fixture
def base_url(tokenizer: Any) -> Iterator[str]:
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]])
    context = ServingContext(config=ServerConfig(served_model_name=MODEL, api_keys=(KEY,)),
                             engine_factory=lambda: engine)
    with serve_in_thread(create_app(context)) as url:
        yield url.removesuffix("/v1")


def test_pages_are_open_and_offline_and_calls_need_the_key(base_url: str) -> None:
    home = httpx.get(f"{base_url}/")
    assert home.status_code == 307 and home.headers["location"] == "/console/"
    for page in ("/console/", "/docs", "/guide/index.html"):
        answer = httpx.get(f"{base_url}{page}")
        assert answer.status_code == 200, page
        for asset in ASSETS.findall(answer.text):
            assert not re.match(r"^(https?:)?//", asset), f"{page} loads {asset} from another host"
            assert httpx.get(httpx.URL(f"{base_url}{page}").join(asset)).status_code == 200, (page, asset)
    assert httpx.get(f"{base_url}/openapi.json").json()["paths"]["/v1/responses"]["get"]
    assert httpx.get(f"{base_url}/v1/models").status_code == 401
    assert httpx.get(f"{base_url}/v1/models", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
    assert httpx.get(f"{base_url}/metrics").status_code == 200


def test_the_docs_site_is_built_where_the_server_serves_it() -> None:
    assert (DOCS_SITE / "index.html").is_file(), "scripts/setup.sh builds it (make docs)"


def test_a_browsers_websocket_offers_its_key_as_a_subprotocol(base_url: str) -> None:
    socket_url = base_url.replace("http://", "ws://") + "/v1/responses"
    with connect(socket_url, subprotocols=["openai-responses", f"openai-insecure-api-key.{KEY}"]) as socket:
        assert socket.subprotocol == "openai-responses"
    with pytest.raises(InvalidStatus) as refused:
        connect(socket_url, subprotocols=["openai-responses", "openai-insecure-api-key.wrong"])
    assert refused.value.response.status_code == 401


def test_the_hosted_tools_are_those_the_operator_set_up(tokenizer: Any) -> None:
    from server.tools.mcp_servers import McpSettings

    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]])
    mcp = McpSettings(servers={"zeta": "http://127.0.0.1:1/mcp", "calc": "http://127.0.0.1:2/mcp"},
                      tool_servers={"python": "http://127.0.0.1:3/mcp"})
    context = ServingContext(config=ServerConfig(served_model_name=MODEL, mcp=mcp), engine_factory=lambda: engine)
    with serve_in_thread(create_app(context)) as url:
        tools = httpx.get(f"{url}/hosted_tools").json()["data"]
    assert tools == [{"type": "mcp", "server_label": "calc", "require_approval": "always"},
                     {"type": "mcp", "server_label": "zeta", "require_approval": "always"},
                     {"type": "code_interpreter", "container": {"type": "auto"}}, {"type": "tool_search"}]
