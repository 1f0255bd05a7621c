"""Prefix-cache affinity (scripted engines, real PostgreSQL): each replica beats in the shared store; a request whose
prefix another live replica holds is forwarded there and its answer relayed byte for byte; when the home cannot take
it, it is served where it landed."""

from __future__ import annotations

import asyncio
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

import httpx
import pytest
from prometheus_client import REGISTRY

from conformance.contract import validate_events
from server.config import ServerConfig
from server.http.app import create_app
from server.http.forwarding import HOP_HEADER
from server.rendezvous import rendezvous
from server.replicas.registry import ReplicaRegistry
from server.runs.context import ServingContext
from server.replicas.records import Replica
from server.responses.records import StoredConversation
from server.runs.admission import Admission
from tests.conftest import serve_asgi, serve_in_thread
from tests.scripted_engine import ScriptedEngine
from tests.sse import events_of, parse_frames
from tests.test_server import MODEL, Harness
from tests.test_store import open_url, record, say, slow


@dataclass
class Node:
    """One replica: its harness (engine and URL) and its registry."""

    name: str
    harness: Harness
    registry: ReplicaRegistry
    admission: Admission
    store_url: str

    @property
    def engine(self) -> ScriptedEngine:
        return self.harness.engine

    def stream(self, **body: Any) -> tuple[list[str], list[dict[str, Any]]]:
        """The SSE body's lines as sent, and its events."""
        with httpx.stream("POST", f"{self.harness.base_url}/responses", json={"model": MODEL, "stream": True, **body},
                          timeout=30) as response:
            assert response.status_code == 200, response.read()
            lines = list(response.iter_lines())
        return lines, events_of(parse_frames(lines))


@contextmanager
def replica(name: str, store_url: str, tokenizer: Any, config: ServerConfig | None = None,
            advertise: bool = True) -> Iterator[Node]:
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]])
    store = open_url(store_url)
    context = ServingContext(config=config or ServerConfig(served_model_name=MODEL), engine_factory=lambda: engine,
                             records=store)
    context.replicas = ReplicaRegistry(store.replicas, name, interval=0.1)
    with serve_in_thread(create_app(context)) as base_url:
        if advertise:  # its address is known once it listens; the next heartbeat registers it
            context.replicas.url = base_url.removesuffix("/v1")
        yield Node(name, Harness(engine, base_url), context.replicas, context.admission, store_url)


def all_live(*nodes: Node) -> None:
    names = sorted(node.name for node in nodes)
    deadline = time.monotonic() + 10
    while any(sorted(node.registry.live()) != names for node in nodes):
        assert time.monotonic() < deadline, [node.registry.live() for node in nodes]
        time.sleep(0.05)


def seen(node: Node, name: str, url: str | None) -> None:
    """Wait until `node` sees replica `name` at `url` (None: not live)."""
    deadline = time.monotonic() + 10
    while node.registry.url_of(name) != url:
        assert time.monotonic() < deadline, node.registry.live()
        time.sleep(0.05)


@pytest.fixture
def pair(tokenizer: Any, postgres: Any) -> Iterator[tuple[Node, Node]]:
    url = postgres.new_database()
    with replica("a", url, tokenizer) as a, replica("b", url, tokenizer) as b:
        all_live(a, b)
        yield a, b


def counted(key: str, outcome: str) -> float:
    return REGISTRY.get_sample_value("responses_server_forwarding_total", {"key": key, "outcome": outcome}) or 0.0


def replayed(node: Node, response_id: str) -> list[str]:
    """The stored stream of a response, as its replica replays it."""
    with httpx.stream("GET", f"{node.harness.base_url}/responses/{response_id}", params={"stream": "true"},
                      timeout=30) as response:
        return list(response.iter_lines())


def test_the_store_keeps_homes_and_the_live_replicas(store_url: str) -> None:
    async def scenario() -> None:
        records = open_url(store_url)
        await records.replicas.heartbeat(Replica("a", "http://a:8000"), draining=False)
        await records.replicas.heartbeat(Replica("b", "http://b:8000"), draining=False)
        await records.replicas.heartbeat(Replica("c", "http://c:8000"), draining=True)
        assert await records.replicas.live_replicas(60) == [Replica("a", "http://a:8000"), Replica("b", "http://b:8000")]
        await asyncio.sleep(0.3)
        await records.replicas.heartbeat(Replica("b", "http://b:9000"), draining=False)
        assert await records.replicas.live_replicas(0.2) == [Replica("b", "http://b:9000")]  # a's heartbeat is too old
        await records.replicas.leave("b")
        assert await records.replicas.live_replicas(60) == [Replica("a", "http://a:8000")]

        from dataclasses import replace
        await records.responses.save(replace(record(1), replica="a"))
        await records.responses.save(record(2))
        assert (await records.responses.response_home("resp_1", "default"), await records.responses.response_home("resp_2", "default")) == ("a", None)
        assert await records.responses.response_home("resp_missing", "default") is None
        await records.conversations.create_conversation(StoredConversation("conv_1", 0, {}), [])
        assert await records.conversations.conversation_home("conv_1", "default") is None
        assert await records.conversations.add_conversation_items("conv_1", [{"id": "msg_1", "type": "message"}], "b", "default")
        assert await records.conversations.add_conversation_items("conv_1", [{"id": "msg_2", "type": "message"}], None, "default")  # by the API
        assert await records.conversations.conversation_home("conv_1", "default") == "b"
        assert not await records.conversations.add_conversation_items("conv_missing", [], "b", "default")
        await records.close()

    asyncio.run(scenario())


def test_chained_turns_sent_alternately_are_all_generated_by_the_first_turns_replica(
        pair: tuple[Node, Node], tokenizer: Any) -> None:
    a, b = pair
    for node in pair:
        node.harness.play(say(tokenizer, "Noted."))
    before = counted("previous_response", "forwarded")
    first = a.harness.client.responses.create(model=MODEL, input="Turn 1.")
    previous = first.id
    for turn, node in enumerate([b, a, b], start=2):
        lines, events = node.stream(input=f"Turn {turn}.", previous_response_id=previous)
        final = validate_events(events)
        assert final.status == "completed" and final.output_text == "Noted."
        previous = final.id
        # byte for byte what the home sent: its stored stream replays the same events
        data = [line for line in lines if line.startswith("data:")]
        assert data == [line for line in replayed(a, final.id) if line.startswith("data:")]
    assert len(a.engine.requests) == 4 and b.engine.requests == []
    assert all(f"Turn {n}." in tokenizer.decode(a.engine.requests[-1].prompt_token_ids) for n in range(1, 5))
    assert counted("previous_response", "forwarded") - before == 2
    json_turn = b.harness.client.responses.create(model=MODEL, input="Turn 5.", previous_response_id=previous)
    assert json_turn.output_text == "Noted." and len(a.engine.requests) == 5 and b.engine.requests == []


def test_a_prompt_cache_key_lands_on_one_replica_whichever_receives_it(pair: tuple[Node, Node],
                                                                      tokenizer: Any) -> None:
    a, b = pair
    for node in pair:
        node.harness.play(say(tokenizer, "Noted."))
    homes = {key: rendezvous(key, ["a", "b"]) for key in (f"session-{n}" for n in range(12))}
    assert set(homes.values()) == {"a", "b"}  # the keys spread over both
    for key, home in homes.items():
        for node in (a, b, a):  # stateless turns, the history sent again, store false
            node.harness.client.responses.create(model=MODEL, input=f"{key} again", prompt_cache_key=key,
                                                 store=False)
    for node in pair:
        keys = {tokenizer.decode(request.prompt_token_ids).split(" again")[0].split()[-1]
                for request in node.engine.requests}
        assert keys == {key for key, home in homes.items() if home == node.name}


def test_a_conversations_turns_go_to_the_replica_of_its_latest_response(pair: tuple[Node, Node],
                                                                        tokenizer: Any) -> None:
    a, b = pair
    for node in pair:
        node.harness.play(say(tokenizer, "Noted."))
    conversation = a.harness.client.conversations.create()
    b.harness.client.responses.create(model=MODEL, input="Turn 1.", conversation=conversation.id)
    for node in (a, b, a):
        node.harness.client.responses.create(model=MODEL, input="Next.", conversation=conversation.id)
    assert len(b.engine.requests) == 4 and a.engine.requests == []


def test_a_home_that_cannot_take_a_request_leaves_it_here(pair: tuple[Node, Node], tokenizer: Any,
                                                          postgres: Any) -> None:
    a, b = pair
    for node in pair:
        node.harness.play(say(tokenizer, "Noted."))
    first = a.harness.client.responses.create(model=MODEL, input="Turn 1.")
    # the hop marker: a request some replica forwarded is never forwarded again
    hopped = httpx.post(f"{b.harness.base_url}/responses", headers={HOP_HEADER: "x"}, timeout=30,
                        json={"model": MODEL, "input": "Turn 2.", "previous_response_id": first.id})
    assert hopped.status_code == 200 and len(b.engine.requests) == 1
    # a home that takes no connection (its address is wrong): a cache miss here, never an error
    before = counted("previous_response", "unreachable")
    a.registry.url = "http://127.0.0.1:9"
    seen(b, "a", "http://127.0.0.1:9")
    served = b.harness.client.responses.create(model=MODEL, input="Turn 2.", previous_response_id=first.id)
    assert served.output_text == "Noted." and len(b.engine.requests) == 2
    assert counted("previous_response", "unreachable") - before == 1
    # a home that is not live any more
    before = counted("previous_response", "home_gone")
    a.registry.draining = lambda: True  # its next heartbeat says so; the others stop sending it requests
    seen(b, "a", None)
    b.harness.client.responses.create(model=MODEL, input="Turn 2.", previous_response_id=first.id)
    assert len(b.engine.requests) == 3 and counted("previous_response", "home_gone") - before == 1


def test_an_overloaded_home_leaves_the_request_here(tokenizer: Any, postgres: Any) -> None:
    url = postgres.new_database()
    config = ServerConfig(served_model_name=MODEL, max_concurrent_requests=1)
    with replica("a", url, tokenizer, config) as a, replica("b", url, tokenizer) as b:
        all_live(a, b)
        a.harness.play(say(tokenizer, "Noted."))
        b.harness.play(say(tokenizer, "Here."))
        first = a.harness.client.responses.create(model=MODEL, input="Turn 1.")
        slow(a.harness, tokenizer, words=200, delay=0.05)
        busy = a.harness.client.responses.create(model=MODEL, input="Busy.", background=True)
        before = counted("previous_response", "overloaded")
        served = b.harness.client.responses.create(model=MODEL, input="Turn 2.", previous_response_id=first.id)
        assert served.output_text == "Here." and counted("previous_response", "overloaded") - before == 1
        a.harness.client.responses.cancel(busy.id)


def test_no_forwarding_serves_every_request_where_it_lands(tokenizer: Any, postgres: Any) -> None:
    url = postgres.new_database()
    config = ServerConfig(served_model_name=MODEL, forwarding=False)
    with replica("a", url, tokenizer) as a, replica("b", url, tokenizer, config) as b:
        all_live(a, b)
        for node in (a, b):
            node.harness.play(say(tokenizer, "Noted."))
        first = a.harness.client.responses.create(model=MODEL, input="Turn 1.")
        b.harness.client.responses.create(model=MODEL, input="Turn 2.", previous_response_id=first.id)
        assert len(a.engine.requests) == 1 and len(b.engine.requests) == 1


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
def test_a_client_that_leaves_a_forwarded_request_aborts_the_homes_engine_request(
        pair: tuple[Node, Node], tokenizer: Any, stream: bool) -> None:
    a, b = pair
    a.harness.play(say(tokenizer, "Noted."))
    first = a.harness.client.responses.create(model=MODEL, input="Turn 1.")
    slow(a.harness, tokenizer, words=300, delay=0.05)
    body = {"model": MODEL, "input": "Count.", "previous_response_id": first.id, "stream": stream}
    if stream:
        with httpx.stream("POST", f"{b.harness.base_url}/responses", json=body, timeout=30) as response:
            for line in response.iter_lines():
                if "output_text.delta" in line:
                    break
    else:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{b.harness.base_url}/responses", json=body, timeout=1.5)
    assert len(a.engine.requests) == 2 and a.harness.engine_aborted_last_request()
    assert b.engine.requests == []


def test_a_draining_home_leaves_the_request_here(pair: tuple[Node, Node], tokenizer: Any) -> None:
    a, b = pair
    for node in pair:
        node.harness.play(say(tokenizer, "Noted."))
    first = a.harness.client.responses.create(model=MODEL, input="Turn 1.")
    before = counted("previous_response", "draining")
    admission = a.admission
    admission.draining = True  # shutting down: A admits nothing (a 503); its heartbeat has not said so yet
    try:
        served = b.harness.client.responses.create(model=MODEL, input="Turn 2.", previous_response_id=first.id)
    finally:
        admission.draining = False
    assert served.output_text == "Noted." and len(b.engine.requests) == 1
    assert counted("previous_response", "draining") - before == 1


async def beat(store_url: str, replica: Replica) -> None:
    """One heartbeat for a replica that is no server of ours."""
    records = open_url(store_url)
    await records.replicas.heartbeat(replica, draining=False)
    await records.close()


def ghost_app() -> Any:
    """A replica that sends two events of a stream, then is lost (its connection drops)."""
    from starlette.applications import Starlette
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    async def frames() -> Any:
        yield b'event: response.created\ndata: {"type":"response.created","sequence_number":0}\n\n'
        yield b'event: response.in_progress\ndata: {"type":"response.in_progress","sequence_number":1}\n\n'
        await asyncio.sleep(0.2)
        raise RuntimeError("the replica is gone")

    async def create(_: Any) -> StreamingResponse:
        return StreamingResponse(frames(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/responses", create, methods=["POST"])])


def test_a_home_lost_mid_stream_ends_it_with_an_error_event(pair: tuple[Node, Node], tokenizer: Any) -> None:
    a, b = pair
    with serve_asgi(ghost_app()) as port:
        asyncio.run(beat(b.store_url, Replica("ghost", f"http://127.0.0.1:{port}")))
        seen(b, "ghost", f"http://127.0.0.1:{port}")
        key = next(key for key in (f"k{n}" for n in range(100)) if rendezvous(key, b.registry.live()) == "ghost")
        lines, events = b.stream(input="x", prompt_cache_key=key)
    assert [event["type"] for event in events] == ["response.created", "response.in_progress", "error"]
    assert events[-1]["code"] == "home_replica_lost" and events[-1]["sequence_number"] == 2
    assert b.engine.requests == []


def test_a_compaction_of_a_chain_is_made_by_its_home(pair: tuple[Node, Node], tokenizer: Any) -> None:
    a, b = pair
    for node in pair:
        node.harness.play(say(tokenizer, "The user said turn 1."))
    first = a.harness.client.responses.create(model=MODEL, input="Turn 1.")
    reply = httpx.post(f"{b.harness.base_url}/responses/compact", timeout=30,
                       json={"model": MODEL, "previous_response_id": first.id})
    assert reply.status_code == 200 and reply.json()["object"] == "response.compaction", reply.text
    assert len(a.engine.requests) == 2 and b.engine.requests == []
