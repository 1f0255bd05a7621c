"""Two projects on one server (and a second replica on the same store), SQLite and PostgreSQL: every way one
project can name another's response or conversation gets exactly what a random id gets, and changes nothing."""

from __future__ import annotations

import hashlib
import json
import re
from contextlib import ExitStack
from typing import Any, Callable, Iterator

import httpx
import pytest

from server.config import ServerConfig
from server.http.app import create_app
from server.runs.context import ServingContext
from server.tenancy.projects_file import ProjectsFile
from server.tenancy.keys import ApiKey
from tests.conftest import serve_in_thread
from tests.scripted_engine import ScriptedEngine, steps_from_tokens
from tests.test_server import MODEL
from tests.test_store import open_url

KEYS = {"alpha": "alpha-secret-key-0123456789abcdef", "beta": "beta-secret-key-0123456789abcdef"}
IDS = re.compile(r"\b(resp|conv|msg|item|pmpt)_[0-9A-Za-z]+")


def declared() -> tuple[ApiKey, ...]:
    return tuple(ApiKey(id=f"file_{name}", name=name, project=name, hash=hashlib.sha256(key.encode()).hexdigest())
                 for name, key in KEYS.items())


@pytest.fixture
def replicas(store_url: str, tokenizer: Any) -> Iterator[tuple[list[str], ScriptedEngine]]:
    """Two apps (replicas) on one store; each engine's fourth request (alpha's background response) runs long, so it
    is still running while the other project reaches for it."""
    answer = steps_from_tokens(tokenizer.encode("Paris is the capital.", add_special_tokens=False)
                               + [tokenizer.eos_token_id], cuts=list(range(1, 8)))
    long = steps_from_tokens(tokenizer.encode(" Paris" * 2000, add_special_tokens=False), cuts=list(range(1, 2000)))
    with ExitStack() as stack:
        urls, engine = [], None
        for _ in range(2):
            engine = ScriptedEngine(tokenizer=tokenizer, scripts=[answer, answer, answer, long], step_delay=0.05)
            context = ServingContext(config=ServerConfig(served_model_name=MODEL, projects=ProjectsFile(declared())),
                                     engine_factory=lambda engine=engine: engine, records=open_url(store_url))
            urls.append(stack.enter_context(serve_in_thread(create_app(context))))
        assert engine is not None
        yield urls, engine


class Client:
    """One project's HTTP client on one replica."""

    def __init__(self, base_url: str, project: str) -> None:
        self.http = httpx.Client(base_url=base_url, timeout=30,
                                 headers={"Authorization": f"Bearer {KEYS[project]}"})

    def create(self, **body: Any) -> dict[str, Any]:
        answer = self.http.post("/responses", json={"model": MODEL, **body})
        assert answer.status_code == 200, answer.text
        return answer.json() if not body.get("stream") else {}


def alpha_objects(alpha: Client) -> dict[str, str]:
    """Alpha's objects of every kind: a stored response, a streamed one, a background one still running, a
    conversation with an item, and a response in that conversation."""
    stored = alpha.create(input="What is the capital of France?")
    with alpha.http.stream("POST", "/responses", json={"model": MODEL, "input": "Again?", "stream": True}) as answer:
        lines = list(answer.iter_lines())
    streamed = next(json.loads(line[5:])["response"]["id"] for line in lines
                    if line.startswith("data:") and '"response.created"' in line)
    conversation = alpha.http.post("/conversations", json={"items": [{"role": "user", "content": "Hello."}]}).json()
    item = alpha.http.get(f"/conversations/{conversation['id']}/items").json()["data"][0]["id"]
    in_conversation = alpha.create(input="And Italy?", conversation=conversation["id"])
    background = alpha.create(input="Slowly, please.", background=True)
    prompt = alpha.http.post("/prompts", json={"instructions": "Be {{mood}}."}).json()
    return {"stored": stored["id"], "streamed": streamed, "in_conversation": in_conversation["id"],
            "background": background["id"], "conversation": conversation["id"], "item": item, "prompt": prompt["id"]}


def attempts(response_id: str, conversation_id: str, item_id: str,
             prompt_id: str) -> dict[str, Callable[[Client], httpx.Response]]:
    """Every route and field that names a response, a conversation, an item or a prompt, as another project would
    use it."""
    def create(**body: Any) -> Callable[[Client], httpx.Response]:
        return lambda c: c.http.post("/responses", json={"model": MODEL, "input": "Go on.", **body})

    def streamed(**body: Any) -> Callable[[Client], httpx.Response]:  # the error comes before any event
        return lambda c: c.http.post("/responses", json={"model": MODEL, "input": "Go on.", "stream": True, **body})

    return {
        "GET response": lambda c: c.http.get(f"/responses/{response_id}"),
        "GET response stream": lambda c: c.http.get(f"/responses/{response_id}", params={"stream": "true"}),
        "GET input_items": lambda c: c.http.get(f"/responses/{response_id}/input_items"),
        "GET timeline": lambda c: c.http.get(f"/responses/{response_id}/timeline"),
        "POST cancel": lambda c: c.http.post(f"/responses/{response_id}/cancel"),
        "previous_response_id": create(previous_response_id=response_id),
        "previous_response_id, streamed": streamed(previous_response_id=response_id),
        "previous_response_id, background": create(previous_response_id=response_id, background=True),
        "compact": lambda c: c.http.post("/responses/compact", json={"model": MODEL,
                                                                     "previous_response_id": response_id}),
        "input_tokens": lambda c: c.http.post("/responses/input_tokens", json={"model": MODEL, "input": "x",
                                                                               "previous_response_id": response_id}),
        "conversation field": create(conversation=conversation_id),
        "item_reference": create(input=[{"type": "item_reference", "id": item_id}]),
        "GET conversation": lambda c: c.http.get(f"/conversations/{conversation_id}"),
        "POST conversation": lambda c: c.http.post(f"/conversations/{conversation_id}", json={"metadata": {"a": "b"}}),
        "GET items": lambda c: c.http.get(f"/conversations/{conversation_id}/items"),
        "POST items": lambda c: c.http.post(f"/conversations/{conversation_id}/items",
                                            json={"items": [{"role": "user", "content": "Injected."}]}),
        "GET item": lambda c: c.http.get(f"/conversations/{conversation_id}/items/{item_id}"),
        "DELETE item": lambda c: c.http.delete(f"/conversations/{conversation_id}/items/{item_id}"),
        "DELETE conversation": lambda c: c.http.delete(f"/conversations/{conversation_id}"),
        "DELETE response": lambda c: c.http.delete(f"/responses/{response_id}"),
        "prompt field": create(prompt={"id": prompt_id, "variables": {"mood": "brief"}}),
        "GET prompt": lambda c: c.http.get(f"/prompts/{prompt_id}"),
        "GET prompt versions": lambda c: c.http.get(f"/prompts/{prompt_id}/versions"),
        "POST prompt version": lambda c: c.http.post(f"/prompts/{prompt_id}/versions",
                                                     json={"instructions": "Be {{mood}}, beta says."}),
    }


def over_websocket(base_url: str, project: str, **event: Any) -> str:
    """The first event the server answers a `response.create` with, over a WebSocket opened with `project`'s key."""
    from websockets.sync.client import connect

    with connect(base_url.replace("http://", "ws://") + "/responses",
                 additional_headers={"Authorization": f"Bearer {KEYS[project]}"}) as socket:
        socket.send(json.dumps({"type": "response.create", "model": MODEL, "input": "Go on.", **event}))
        return IDS.sub("ID", socket.recv(timeout=30))


def seen(answer: httpx.Response) -> tuple[int, str]:
    """What a client learns from an answer, ids made alike."""
    return answer.status_code, IDS.sub("ID", answer.text)


def random_like(object_id: str) -> str:
    prefix, _, rest = object_id.partition("_")
    return f"{prefix}_{'0' * len(rest)}"


def test_another_projects_objects_are_exactly_missing_ones(replicas: tuple[list[str], ScriptedEngine]) -> None:
    urls, _ = replicas
    alpha = Client(urls[0], "alpha")
    objects = alpha_objects(alpha)
    for url in urls:  # on the replica that made them, and on the other one
        beta = Client(url, "beta")
        for kind in ("background", "stored", "streamed", "in_conversation"):
            theirs = attempts(objects[kind], objects["conversation"], objects["item"], objects["prompt"])
            missing = attempts(random_like(objects[kind]), random_like(objects["conversation"]),
                               random_like(objects["item"]), random_like(objects["prompt"]))
            for name, attempt in theirs.items():
                assert seen(attempt(beta)) == seen(missing[name](beta)), (kind, name, url)
            for field, value in (("previous_response_id", objects[kind]), ("conversation", objects["conversation"])):
                refused = over_websocket(url, "beta", **{field: value})
                assert refused == over_websocket(url, "beta", **{field: random_like(value)}), (kind, field, url)
                assert '"type":"error"' in refused.replace(" ", ""), refused
    # nothing of alpha's changed or went away
    for kind in ("stored", "streamed", "in_conversation"):
        assert alpha.http.get(f"/responses/{objects[kind]}").status_code == 200, kind
    items = alpha.http.get(f"/conversations/{objects['conversation']}/items", params={"order": "asc"}).json()["data"]
    assert items[0]["id"] == objects["item"] and "Injected." not in json.dumps(items)
    assert alpha.http.get(f"/conversations/{objects['conversation']}").json()["metadata"] == {}
    assert [p["version"] for p in alpha.http.get(f"/prompts/{objects['prompt']}/versions").json()["data"]] == ["1"]
    assert alpha.http.get(f"/responses/{objects['background']}").json()["status"] == "in_progress", \
        "beta's cancel or delete reached alpha's background response"
    assert alpha.http.post(f"/responses/{objects['background']}/cancel").json()["status"] == "cancelled"


def test_each_project_lists_and_continues_its_own(replicas: tuple[list[str], ScriptedEngine]) -> None:
    urls, _ = replicas
    alpha, beta = Client(urls[0], "alpha"), Client(urls[1], "beta")
    first = alpha.create(input="What is the capital of France?")
    mine = beta.create(input="What is the capital of Spain?")
    assert beta.create(input="And Italy?", previous_response_id=mine["id"])["status"] == "completed"
    assert alpha.create(input="And Italy?", previous_response_id=first["id"])["status"] == "completed"
    assert alpha.http.delete(f"/responses/{first['id']}").status_code == 200
    assert beta.http.get(f"/responses/{mine['id']}").status_code == 200


def test_a_request_forwarded_to_the_home_replica_is_checked_there(tokenizer: Any, postgres: Any) -> None:
    """Two replicas that forward to each other (prefix affinity). Beta, on B, naming alpha's response made on A is
    not forwarded (B finds no home for it in beta's view) and is a 404 as a random id is; a request that arrives at A
    forwarded (the hop marker) with beta's key is checked at A, the same; alpha's own continuation on B is forwarded
    to A and completes."""
    from server.http.forwarding import HOP_HEADER
    from tests.test_affinity import all_live, counted, replica

    url = postgres.new_database()
    config = ServerConfig(served_model_name=MODEL, projects=ProjectsFile(declared()))
    answer = steps_from_tokens(tokenizer.encode("Paris.", add_special_tokens=False) + [tokenizer.eos_token_id],
                               cuts=[1])
    with replica("a", url, tokenizer, config) as a, replica("b", url, tokenizer, config) as b:
        all_live(a, b)
        a.engine.scripts = b.engine.scripts = [answer]
        made = Client(a.harness.base_url, "alpha").create(input="What is the capital of France?")

        def continued(node: Any, project: str, response_id: str, **headers: str) -> httpx.Response:
            return Client(node.harness.base_url, project).http.post(
                "/responses", headers=headers, json={"model": MODEL, "input": "Go on.",
                                                     "previous_response_id": response_id})

        forwarded = counted("previous_response", "forwarded")
        for node, headers in ((b, {}), (a, {HOP_HEADER: "b"})):
            theirs, missing = (continued(node, "beta", made["id"], **headers),
                               continued(node, "beta", random_like(made["id"]), **headers))
            assert seen(theirs) == seen(missing) and theirs.status_code == 404, node.name
        assert counted("previous_response", "forwarded") == forwarded  # beta's were never sent to alpha's home
        mine = continued(b, "alpha", made["id"])
        assert mine.status_code == 200 and mine.json()["status"] == "completed"
        assert counted("previous_response", "forwarded") == forwarded + 1  # alpha's went home, to A


def test_each_project_lists_only_its_own_responses(replicas: tuple[list[str], ScriptedEngine]) -> None:
    """`GET /v1/responses` (the console's list): a project's own, newest first, paged by cursor and filtered by
    status, model, time and the response they continue; another project's never appear, whatever the filter."""
    urls, _ = replicas
    alpha, beta = Client(urls[0], "alpha"), Client(urls[1], "beta")
    first = alpha.create(input="What is the capital of France?")
    theirs = beta.create(input="What is the capital of Spain?")
    second = alpha.create(input="And Italy?", previous_response_id=first["id"])
    third = alpha.create(input="And Peru?", previous_response_id=first["id"])

    def listed(client: Client, **params: Any) -> list[str]:
        answer = client.http.get("/responses", params=params)
        assert answer.status_code == 200, answer.text
        return [response["id"] for response in answer.json()["data"]]

    assert listed(alpha) == [third["id"], second["id"], first["id"]]
    assert listed(beta) == [theirs["id"]] and listed(Client(urls[0], "beta")) == [theirs["id"]]
    assert listed(alpha, order="asc") == [first["id"], second["id"], third["id"]]
    page = alpha.http.get("/responses", params={"limit": 2}).json()
    assert page["has_more"] and page["last_id"] == second["id"]
    assert listed(alpha, after=page["last_id"]) == [first["id"]]
    assert listed(alpha, previous_response_id=first["id"]) == [third["id"], second["id"]]
    assert listed(beta, previous_response_id=first["id"]) == [] and listed(beta, after=first["id"]) == []
    assert listed(alpha, status="completed", model=MODEL) == [third["id"], second["id"], first["id"]]
    assert listed(alpha, status="failed") == [] and listed(alpha, model="another-model") == []
    made = first["created_at"]  # whole seconds: the three may share one
    assert listed(alpha, created_after=made, created_before=third["created_at"] + 1) == listed(alpha)
    assert listed(alpha, created_after=third["created_at"] + 1) == [] == listed(alpha, created_before=made)
    assert alpha.http.get("/responses", params={"status": "sleeping"}).status_code == 400
