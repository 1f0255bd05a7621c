"""A fleet behind the real app: models on scale-out worker doubles (tests/scale_out_worker.py) driven over HTTP by the
remote engine; routing, faults, many models and the prefix cache's salts. The real vLLM workers: test_e2e_fleet.py."""

from __future__ import annotations

import json
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from conformance.contract import validate_events
from server.config import ServerConfig
from server.engine.interface import EngineUnavailable
from server.engine.remote import WORKER_LOST, RemoteEngine, WorkerMismatch
from server.engine.stall import StallLimits
from server.engine.workers import LoadLimits, Worker, WorkerSet
from server.history.sealing import Sealer
from server.http.app import create_app
from server.models.registry import ModelStart
from server.model_settings import ModelSettings
from server.runs.context import ServingContext
from tests.stores import sqlite_records
from tests.conftest import serve_asgi, serve_in_thread
from tests.fault_proxy import fault_proxy
from tests.scale_out_worker import ScaleOutWorker
from tests.scripted_engine import ContinuingEngine, ScriptedEngine, steps_from_tokens
from tests.sse import events_of, parse_frames

SMALL, OTHER = "small", "other"


def test_every_gateway_sends_a_key_to_the_same_worker_and_only_a_departed_workers_keys_move() -> None:
    urls = [f"http://w{n}:8000" for n in range(4)]
    first, second = WorkerSet.of(SMALL, urls), WorkerSet.of(SMALL, list(reversed(urls)))
    for workers in (first, second):
        for worker in workers.workers:
            worker.came_up()
    keys = [f"session-{n}" for n in range(64)]
    chosen = {key: first.choose(key).url for key in keys}
    assert chosen == {key: second.choose(key).url for key in keys}  # no word between the gateways
    assert len(set(chosen.values())) == 4  # the keys spread over the workers
    gone = first.workers[0]
    gone.refused("test")
    moved = {key for key in keys if first.choose(key).url != chosen[key]}
    assert moved == {key for key in keys if chosen[key] == gone.url}


def test_a_saturated_worker_passes_its_turns_to_the_least_loaded_and_none_up_is_unavailable() -> None:
    workers = WorkerSet.of(SMALL, ["http://a", "http://b"], limits=LoadLimits(max_waiting=4))
    for worker in workers.workers:
        worker.came_up()
    key = "k"
    home = workers.choose(key)
    other = next(worker for worker in workers.workers if worker is not home)
    home.waiting = 3
    assert workers.choose(key) is home  # below the threshold: its cache is worth the wait
    home.waiting = 4
    assert workers.choose(key) is other
    for worker in workers.workers:
        worker.refused("test")
    with pytest.raises(EngineUnavailable, match="No engine worker of the model 'small' is up"):
        workers.choose(key)


def test_waiting_requests_are_read_from_the_workers_metrics_for_its_model() -> None:
    workers, worker = WorkerSet.of(SMALL, ["http://a"]), Worker("http://a")
    workers.update_waiting(worker, '# HELP x\nvllm:num_requests_waiting{engine="0",model_name="small"} 7.0\n'
                                   'vllm:num_requests_waiting{engine="0",model_name="else"} 5.0\n'
                                   'vllm:num_requests_waiting_by_reason{model_name="small",reason="x"} 9.0\n')
    assert worker.waiting == 7


class Fleet:
    """The app serving two models on worker doubles: SMALL on two workers, OTHER on one. With `proxied`, SMALL's
    workers are reached through fault proxies (`proxies`); `small_engine` runs SMALL instead of a scripted engine."""

    def __init__(self, tokenizer: Any, stack: ExitStack, sealer: Sealer, store: Path, proxied: bool = False,
                 limits: StallLimits = StallLimits(), small_engine: Any = None, **config: Any) -> None:
        self.engines = {name: ScriptedEngine(tokenizer=tokenizer, scripts=[[]]) for name in (SMALL, OTHER)}
        if small_engine is not None:
            self.engines[SMALL] = small_engine
        self.workers = [ScaleOutWorker(self.engines[SMALL], SMALL), ScaleOutWorker(self.engines[SMALL], SMALL),
                        ScaleOutWorker(self.engines[OTHER], OTHER)]
        ports = [stack.enter_context(serve_asgi(worker)) for worker in self.workers]
        self.proxies = [stack.enter_context(contextmanager(fault_proxy)(port)) for port in ports[:2]] if proxied else []
        ports[:len(self.proxies)] = [proxy.port for proxy in self.proxies]
        self.urls = [f"http://127.0.0.1:{port}" for port in ports]
        small, other = WorkerSet.of(SMALL, self.urls[:2]), WorkerSet.of(OTHER, self.urls[2:])
        self.small = small
        starts = (ModelStart(ModelSettings(SMALL), self._start(small, tokenizer, limits), small),
                  ModelStart(ModelSettings(OTHER), self._start(other, tokenizer, limits), other))
        self.context = ServingContext(config=ServerConfig(served_model_name=SMALL, **config), model_starts=starts,
                                      sealer=sealer, records=sqlite_records(store))
        self.base_url = stack.enter_context(serve_in_thread(create_app(self.context)))

    @staticmethod
    def _start(workers: WorkerSet, tokenizer: Any, limits: StallLimits) -> Any:
        def start() -> RemoteEngine:
            engine = RemoteEngine(workers, tokenizer, health_seconds=0.2, limits=limits)
            engine.probe_all()
            engine.watch()
            return engine
        return start

    def play(self, model: str, *scripts: Any) -> None:
        engine = self.engines[model]
        engine.scripts, engine.first = list(scripts), len(engine.requests)

    def stream(self, **body: Any) -> list[dict[str, Any]]:
        with httpx.stream("POST", f"{self.base_url}/responses", json={"model": SMALL, "stream": True, **body},
                          timeout=30) as response:
            assert response.status_code == 200, response.read()
            return events_of(parse_frames(response.iter_lines()))


SEALER = Sealer.ephemeral()


@pytest.fixture
def fleet(tokenizer: Any, tmp_path: Path) -> Iterator[Fleet]:
    with ExitStack() as stack:
        yield Fleet(tokenizer, stack, SEALER, tmp_path / "responses.db")


def _answer(tokenizer: Any, text: str) -> list[Any]:
    return steps_from_tokens(tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id], cuts=[2])


def _sent_to(fleet: Fleet, before: list[int]) -> list[int]:
    """The workers that received a request since `before` (each worker's body count then)."""
    return [index for index, worker in enumerate(fleet.workers) for _ in worker.bodies[before[index]:]]


def _counts(fleet: Fleet) -> list[int]:
    return [len(worker.bodies) for worker in fleet.workers]


def test_each_model_runs_on_its_own_workers_and_a_chain_stays_on_one(fleet: Fleet, tokenizer: Any) -> None:
    fleet.play(SMALL, _answer(tokenizer, "Paris."))
    fleet.play(OTHER, _answer(tokenizer, "Lyon."))
    before = _counts(fleet)
    first = validate_events(fleet.stream(input="Where?"))
    previous, turns = first.id, []
    for _ in range(4):
        turns.append(validate_events(fleet.stream(input="And then?", previous_response_id=previous)))
        previous = turns[-1].id
    sent = _sent_to(fleet, before)
    assert len(sent) == 5 and len(set(sent)) == 1 and sent[0] in (0, 1)  # one worker of SMALL holds the chain
    before = _counts(fleet)
    other = validate_events(fleet.stream(model=OTHER, input="Where else?", previous_response_id=previous))
    assert _sent_to(fleet, before) == [2] and other.model == OTHER and other.output_text == "Lyon."
    listed = httpx.get(f"{fleet.base_url}/models").json()
    assert [model["id"] for model in listed["data"]] == [SMALL, OTHER]
    assert httpx.get(f"{fleet.base_url}/models/{OTHER}").json()["id"] == OTHER
    missing = httpx.post(f"{fleet.base_url}/responses", json={"model": "nope", "input": "hi"})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"


def test_a_json_answer_comes_from_its_worker_many_tokens_a_chunk_and_a_stream_one_a_chunk(
        fleet: Fleet, tokenizer: Any) -> None:
    """A JSON answer is read at its end: its worker sends its tokens many to a chunk (vLLM's `stream_interval`: the
    first at once, the last at once), so the gateway wakes a few times a turn, not once a token; a stream's tokens
    come as generated. The same answer either way."""
    tokens = tokenizer.encode(" ".join(f"item {n}," for n in range(30)), add_special_tokens=False)
    one_a_step = steps_from_tokens(tokens + [tokenizer.eos_token_id], cuts=list(range(1, len(tokens) + 1)))
    fleet.play(SMALL, one_a_step, one_a_step)

    def chunks() -> int:
        return sum(worker.chunks_sent for worker in fleet.workers)
    before = chunks()
    answer = httpx.post(f"{fleet.base_url}/responses", json={"model": SMALL, "input": "List."}, timeout=30)
    json_chunks, before = chunks() - before, chunks()
    streamed = validate_events(fleet.stream(input="List."))
    assert chunks() - before >= len(tokens) + 1  # one a token
    assert json_chunks <= 3 + len(tokens) // 16, json_chunks
    assert answer.status_code == 200 and answer.json()["output"][0]["content"][0]["text"] == streamed.output_text
    assert answer.json()["usage"]["output_tokens"] == streamed.usage.output_tokens == len(tokens) + 1


def test_conversations_spread_over_the_workers_by_their_keys(fleet: Fleet, tokenizer: Any) -> None:
    fleet.play(SMALL, _answer(tokenizer, "Yes."))
    sent = []
    for n in range(12):
        before = _counts(fleet)
        fleet.stream(input="hi", prompt_cache_key=f"session-{n}", store=False)
        sent += _sent_to(fleet, before)
    assert set(sent) == {0, 1}  # both workers of SMALL, none of OTHER
    for n in range(12):  # a key's turns go where its first went
        before = _counts(fleet)
        fleet.stream(input="again", prompt_cache_key=f"session-{n}", store=False)
        assert _sent_to(fleet, before) == [sent[n]]


ANSWER = "The capital of France is Paris, of course, and it has been for a very long time indeed."


def _continuing(tokenizer: Any) -> ContinuingEngine:
    return ContinuingEngine(tokenizer, tokenizer.encode(ANSWER, add_special_tokens=False) + [tokenizer.eos_token_id])


def _home(fleet: Fleet, key: str) -> int:
    return fleet.urls.index(fleet.small.choose(key).url)


def _deltas(events: list[dict[str, Any]]) -> str:
    return "".join(event["delta"] for event in events if event["type"] == "response.output_text.delta")


def test_a_worker_that_dies_mid_stream_hands_its_stream_to_its_peer_and_its_turns_follow(
        tokenizer: Any, tmp_path: Path) -> None:
    """The peer goes on from the prompt and the tokens already generated, with the budget left: the client sees one
    stream, its text whole, each token counted once; the chain's turns go to the peer while the worker is down."""
    with ExitStack() as stack:
        engine = _continuing(tokenizer)
        fleet = Fleet(tokenizer, stack, SEALER, tmp_path / "r.db", small_engine=engine)
        quiet = validate_events(fleet.stream(input="Where?", prompt_cache_key="k", max_output_tokens=100))
        home = _home(fleet, "k")
        fleet.workers[home].drop_after, fleet.workers[home].chunks_sent = 3, 0
        before = len(engine.requests)
        events = fleet.stream(input="Where?", prompt_cache_key="k", max_output_tokens=100)
        final = validate_events(events)
        assert events[-1]["type"] == "response.completed" and final.output_text == quiet.output_text == ANSWER
        assert _deltas(events) == ANSWER  # no delta lost or sent twice
        assert final.usage is not None and quiet.usage is not None
        assert (final.usage.input_tokens, final.usage.output_tokens) == (quiet.usage.input_tokens,
                                                                         quiet.usage.output_tokens)
        first, resumed = engine.requests[before:]
        generated = resumed.prompt_token_ids[len(first.prompt_token_ids):]
        assert resumed.prompt_token_ids[:len(first.prompt_token_ids)] == first.prompt_token_ids
        assert generated == engine.answer[:len(generated)] and len(generated) >= 2
        assert resumed.sampling.max_tokens == first.sampling.max_tokens - len(generated)
        stored = httpx.get(f"{fleet.base_url}/responses/{final.id}").json()
        assert stored["status"] == "completed" and stored["output"][0]["content"][0]["text"] == ANSWER
        deadline = time.monotonic() + 10
        while fleet.small.workers[home].condition.value != "down" and time.monotonic() < deadline:
            time.sleep(0.1)  # its /health fails twice
        sent = len(fleet.workers[home].bodies)
        again = validate_events(fleet.stream(input="More?", previous_response_id=final.id, prompt_cache_key="k"))
        assert again.status == "completed" and len(fleet.workers[home].bodies) == sent  # on the peer
        fleet.workers[home].healthy, fleet.workers[home].drop_after = True, None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # its health is back: the key goes home again
            sent = len(fleet.workers[home].bodies)
            validate_events(fleet.stream(input="More?", prompt_cache_key="k"))
            if len(fleet.workers[home].bodies) > sent:
                break
            time.sleep(0.2)
        else:
            raise AssertionError("the worker was not used again once its health came back")


def test_a_hung_worker_is_found_by_its_silence_and_its_stream_moves(tokenizer: Any, tmp_path: Path) -> None:
    """Its engine stuck mid-stream while its /health still answers 200 (vLLM's can): the idle timeout moves the
    stream to the peer; it is suspected, not yet ejected (one failure)."""
    with ExitStack() as stack:
        fleet = Fleet(tokenizer, stack, SEALER, tmp_path / "r.db", small_engine=_continuing(tokenizer),
                      limits=StallLimits(first_token_seconds=30, idle_seconds=0.5))
        home = _home(fleet, "k")
        fleet.workers[home].hang_after = 2
        events = fleet.stream(input="Where?", prompt_cache_key="k", max_output_tokens=100)
        assert events[-1]["type"] == "response.completed" and _deltas(events) == ANSWER
        worker = fleet.small.workers[home]
        assert worker.condition.value == "suspected" and worker.failures == 1


def test_a_worker_cut_off_without_a_reset_loses_its_stream_to_the_peer(tokenizer: Any, tmp_path: Path) -> None:
    """A black hole between the gateway and the worker (a node lost without a reset): nothing arrives, the stream
    moves to the peer, and the worker is taken out of rotation once its health checks time out too."""
    with ExitStack() as stack:
        fleet = Fleet(tokenizer, stack, SEALER, tmp_path / "r.db", proxied=True, small_engine=_continuing(tokenizer),
                      limits=StallLimits(first_token_seconds=30, idle_seconds=1.0))
        home = _home(fleet, "k")
        proxy = fleet.proxies[home]
        fleet.workers[home].on_chunk = lambda sent: proxy.set("black_hole") if sent == 2 else None
        events = fleet.stream(input="Where?", prompt_cache_key="k", max_output_tokens=100)
        assert events[-1]["type"] == "response.completed" and _deltas(events) == ANSWER
        deadline = time.monotonic() + 15
        while fleet.small.workers[home].in_rotation and time.monotonic() < deadline:
            time.sleep(0.2)
        assert fleet.small.workers[home].condition.value == "down"
        for _ in range(3):  # its turns go to the peer, no time lost on it
            assert fleet.stream(input="Again?", prompt_cache_key="k")[-1]["type"] == "response.completed"
        proxy.set("pass")


def test_failures_before_the_worker_answered_are_retried_on_the_peer_and_eject_it(
        tokenizer: Any, tmp_path: Path) -> None:
    """A 503 (a router or a draining worker) and a reset connection: each turn goes to the next worker of its key's
    order and completes; three in a row take the worker out of rotation, its turns then going to the peer at once."""
    from prometheus_client import REGISTRY

    def retries(reason: str) -> float:
        return REGISTRY.get_sample_value("responses_server_engine_retries_total",
                                         {"model": SMALL, "reason": reason}) or 0.0

    with ExitStack() as stack:
        fleet = Fleet(tokenizer, stack, SEALER, tmp_path / "r.db", proxied=True, small_engine=_continuing(tokenizer))
        home = _home(fleet, "k")
        proxy, worker = fleet.proxies[home], fleet.small.workers[home]
        proxy.set("reset_once")
        before = retries("reset")
        assert _deltas(fleet.stream(input="Where?", prompt_cache_key="k", max_output_tokens=100)) == ANSWER
        assert retries("reset") == before + 1 and worker.condition.value == "suspected"
        proxy.set("status_503")
        before = retries("status")
        for _ in range(3):
            assert _deltas(fleet.stream(input="Where?", prompt_cache_key="k", max_output_tokens=100)) == ANSWER
        assert retries("status") == before + 2 and worker.condition.value == "ejected"  # the third: ejected first
        assert not fleet.workers[home].bodies  # none of it reached the worker
        assert fleet.stream(input="Where?", prompt_cache_key="k")[-1]["type"] == "response.completed"
        assert retries("status") == before + 2  # ejected: not tried (its 503 would be one more retry; the proxy's
        # connections would count its health checks too, every 0.2 s here, which bring it back once its time is over)


def test_a_request_no_worker_takes_is_the_clients_503_with_retry_after_and_nothing_is_stored(
        tokenizer: Any, tmp_path: Path) -> None:
    """Every worker answers 503 (each draining, or a router with no room): the client is told before any event, as
    HTTP says it (the SDK's own retry then applies), streamed or not; no response is stored for it."""
    from openai import APIStatusError, OpenAI

    with ExitStack() as stack:
        fleet = Fleet(tokenizer, stack, SEALER, tmp_path / "r.db", proxied=True, small_engine=_continuing(tokenizer))
        for proxy in fleet.proxies:
            proxy.set("status_503")
        client = OpenAI(base_url=fleet.base_url, api_key="none", max_retries=0)
        for stream in (True, False):
            with pytest.raises(APIStatusError) as refused:
                answer = client.responses.create(model=SMALL, input="Where?", stream=stream)
                if stream:
                    list(answer)  # type: ignore[arg-type]
            assert refused.value.status_code == 503 and refused.value.response.headers["retry-after"]
            assert refused.value.body["code"] == "engine_unavailable"  # type: ignore[index]
        from websockets.sync.client import connect

        with connect(fleet.base_url.replace("http", "ws", 1) + "/responses") as socket:
            socket.send(json.dumps({"type": "response.create", "model": SMALL, "input": "Where?"}))
            error = json.loads(socket.recv(timeout=30))
        assert (error["type"], error["status"], error["error"]["code"]) == ("error", 503, "engine_unavailable")
        assert httpx.get(f"{fleet.base_url}/responses").json()["data"] == []
        for proxy in fleet.proxies:
            proxy.set("pass")
        retrying = OpenAI(base_url=fleet.base_url, api_key="none", max_retries=2)
        assert retrying.responses.create(model=SMALL, input="Where?").status == "completed"


def test_a_constrained_stream_whose_worker_dies_after_output_ends_failed_and_before_it_restarts(
        fleet: Fleet, tokenizer: Any) -> None:
    """A grammar's state cannot be restated on a peer from tokens in its prompt: once output went out, the response
    ends failed as the client was told (one terminal event, stored); lost before its first token, it starts again
    on the peer."""
    schema = {"format": {"type": "json_schema", "name": "x", "strict": True, "schema": {
        "type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"], "additionalProperties": False}}}
    answer = tokenizer.encode('{"a": "Paris is the capital of France"}', add_special_tokens=False)
    fleet.play(SMALL, steps_from_tokens(answer + [tokenizer.eos_token_id], cuts=list(range(2, 40, 2))))
    home = _home(fleet, "json")
    fleet.workers[home].drop_after, fleet.workers[home].chunks_sent = 3, 0
    events = fleet.stream(input="Where?", prompt_cache_key="json", text=schema)
    failed = validate_events(events)
    assert events[-1]["type"] == "response.failed" and failed.error is not None and failed.error.message == WORKER_LOST
    stored = httpx.get(f"{fleet.base_url}/responses/{failed.id}").json()
    assert stored["status"] == "failed" and stored["error"]["message"] == WORKER_LOST
    fleet.workers[home].healthy = True
    deadline = time.monotonic() + 10
    while fleet.small.workers[home].condition.value != "up" and time.monotonic() < deadline:
        time.sleep(0.1)
    fleet.workers[home].drop_after, fleet.workers[home].chunks_sent = 0, 0  # dies at its first chunk
    events = fleet.stream(input="Where?", prompt_cache_key="json", text=schema)
    assert events[-1]["type"] == "response.completed", events[-1]
    assert validate_events(events).output_text == '{"a": "Paris is the capital of France"}'


def test_every_worker_of_a_model_down_is_a_503_and_the_other_model_still_answers(fleet: Fleet, tokenizer: Any) -> None:
    fleet.play(SMALL, _answer(tokenizer, "Yes."))
    fleet.play(OTHER, _answer(tokenizer, "Also."))
    fleet.workers[0].healthy = fleet.workers[1].healthy = False
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        answer = httpx.post(f"{fleet.base_url}/responses", json={"model": SMALL, "input": "hi", "stream": True})
        if answer.status_code == 503:
            break
        time.sleep(0.2)
    assert answer.status_code == 503 and answer.headers["retry-after"]
    assert answer.json()["error"]["code"] == "engine_unavailable" and answer.json()["error"]["type"] == "server_error"
    assert validate_events(fleet.stream(model=OTHER, input="hi")).output_text == "Also."


def test_a_worker_refusing_one_request_fails_that_request_only(fleet: Fleet, tokenizer: Any) -> None:
    fleet.play(SMALL, [RuntimeError("the grammar could not be compiled")], _answer(tokenizer, "Fine."))
    failed = fleet.stream(input="hi", prompt_cache_key="same")
    assert failed[-1]["type"] == "response.failed"
    assert validate_events(fleet.stream(input="hi", prompt_cache_key="same")).output_text == "Fine."


def test_each_project_partitions_the_prefix_cache_alike_on_every_gateway(tokenizer: Any, tmp_path: Path) -> None:
    from server.runs.placement import CACHE_SALT_PURPOSE

    with ExitStack() as stack:
        store = tmp_path / "responses.db"  # the gateways share it, as replicas share PostgreSQL
        gateways = [Fleet(tokenizer, stack, SEALER, store), Fleet(tokenizer, stack, SEALER, store)]
        shared = Fleet(tokenizer, stack, SEALER, tmp_path / "other.db", isolate_prefix_cache=False)
        salts = []
        for fleet in (*gateways, shared):
            fleet.play(SMALL, _answer(tokenizer, "Yes."))
            fleet.stream(input="hi", prompt_cache_key="k")
            salts.append(next(worker.bodies[-1].get("cache_salt") for worker in fleet.workers if worker.bodies))
    assert salts[0] == salts[1] == SEALER.tag(CACHE_SALT_PURPOSE, "default") and salts[2] is None
    assert SEALER.tag(CACHE_SALT_PURPOSE, "alpha") != SEALER.tag(CACHE_SALT_PURPOSE, "beta")
    assert len(salts[0]) <= 128 and not set("@/\\") & set(salts[0])  # as vLLM's cache_salt takes it


def test_a_worker_serving_another_model_is_refused_at_start_naming_both(tokenizer: Any) -> None:
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]])
    with serve_asgi(ScaleOutWorker(engine, "someone-else")) as port:
        remote = RemoteEngine(WorkerSet.of(SMALL, [f"http://127.0.0.1:{port}"]), tokenizer)
        with pytest.raises(WorkerMismatch, match="serves 'someone-else', not 'small'"):
            remote.probe_all()
    unreachable = RemoteEngine(WorkerSet.of(SMALL, [f"http://127.0.0.1:{port}"]), tokenizer)
    unreachable.probe_all()  # reported, not fatal: it is watched until it comes up
    assert not unreachable.workers.in_rotation()


def test_a_projects_priority_reaches_the_engine_and_a_keys_own_wins(tokenizer: Any, tmp_path: Path) -> None:
    from hashlib import sha256

    from server.tenancy.projects_file import ProjectsFile, read_projects_file

    declared = tmp_path / "projects.toml"
    declared.write_text(f'[[projects]]\nname = "alpha"\npriority = 5\n\n[[keys]]\nname = "urgent"\nproject = "alpha"\n'
                        f'sha256 = "{sha256(b"k").hexdigest()}"\npriority = -2\n')
    projects = read_projects_file(declared)
    (key,) = projects.keys
    assert projects.priority("alpha", None) == 5 and projects.priority("alpha", key.id) == -2
    assert projects.priority("beta", None) == 0
    with ExitStack() as stack:
        fleet = Fleet(tokenizer, stack, SEALER, tmp_path / "r.db", projects=ProjectsFile(project_priorities={
            "default": -3}))
        fleet.play(SMALL, _answer(tokenizer, "Yes."))
        fleet.stream(input="hi")
        assert [worker.bodies[-1]["priority"] for worker in fleet.workers if worker.bodies] == [-3]


def test_a_worker_dead_before_its_health_check_noticed_costs_a_turn_nothing(tokenizer: Any) -> None:
    """The connection is refused: nothing reached the worker, so the turn goes to the next choice at once."""
    import asyncio

    from server.engine.interface import EngineRequest, SamplingSettings
    from tests.conftest import free_port

    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[_answer(tokenizer, "Alive.")])
    with serve_asgi(ScaleOutWorker(engine, SMALL)) as port:
        dead, live = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{port}"
        remote = RemoteEngine(WorkerSet.of(SMALL, [dead, live]), tokenizer)
        for worker in remote.workers.workers:
            worker.came_up()  # as the last health check saw them
        key = next(f"k{n}" for n in range(100) if remote.workers.choose(f"k{n}").url == dead)

        async def run() -> list[int]:
            request = EngineRequest("resp_x", [1, 2, 3], SamplingSettings(max_tokens=8), affinity=key)
            tokens = [token async for step in remote.generate(request) for token in step.token_ids]
            await remote.shutdown()
            return tokens

        assert tokenizer.decode(asyncio.run(run()), skip_special_tokens=True) == "Alive."
        assert [worker.url for worker in remote.workers.in_rotation()] == [live]


def test_a_workers_connection_serves_one_request_after_another(tokenizer: Any) -> None:
    """Each request reads its stream to the end, so its connection goes back to the pool for the next one."""
    import asyncio

    from server.engine.interface import EngineRequest, SamplingSettings

    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[_answer(tokenizer, "One."), _answer(tokenizer, "Two."),
                                                          _answer(tokenizer, "Three.")])
    worker = ScaleOutWorker(engine, SMALL)
    with serve_asgi(worker) as port:
        remote = RemoteEngine(WorkerSet.of(SMALL, [f"http://127.0.0.1:{port}"]), tokenizer)
        remote.workers.workers[0].came_up()

        async def run() -> list[str]:
            texts = []
            for n in range(3):
                request = EngineRequest(f"resp_{n}", [1, 2, 3], SamplingSettings(max_tokens=8))
                tokens = [token async for step in remote.generate(request) for token in step.token_ids]
                texts.append(tokenizer.decode(tokens, skip_special_tokens=True))
            await remote.shutdown()
            return texts

        assert asyncio.run(run()) == ["One.", "Two.", "Three."]
    assert len(worker.generate_clients) == 3 and len(set(worker.generate_clients)) == 1, worker.generate_clients


def test_a_worker_that_just_answered_a_request_is_not_asked_for_its_health(tokenizer: Any) -> None:
    """A stream the worker served is proof it is up: the health check skips it for one interval, so a busy gateway
    spends nothing on probes (one that has not been heard from is checked as before)."""
    import asyncio

    from server.engine.interface import EngineRequest, SamplingSettings

    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[_answer(tokenizer, "Up.")])
    worker = ScaleOutWorker(engine, SMALL)
    with serve_asgi(worker) as port:
        remote = RemoteEngine(WorkerSet.of(SMALL, [f"http://127.0.0.1:{port}"]), tokenizer, health_seconds=60)
        seen = remote.workers.workers[0]

        async def run() -> list[int]:
            checks = []
            await remote._probe(seen, read_load=False)  # never heard from: checked
            checks.append(worker.health_checks)
            request = EngineRequest("resp_1", [1, 2, 3], SamplingSettings(max_tokens=8))
            assert [step async for step in remote.generate(request)]
            await remote._probe(seen, read_load=False)  # it just answered: not checked
            checks.append(worker.health_checks)
            seen.heard_at -= 61  # an interval later
            await remote._probe(seen, read_load=False)
            checks.append(worker.health_checks)
            await remote.shutdown()
            return checks

        assert asyncio.run(run()) == [1, 1, 2]


def test_a_streaming_worker_silent_for_an_interval_is_asked_for_its_health_and_a_slow_metrics_is_no_fault(
        tokenizer: Any) -> None:
    """A worker that sent a byte within the interval is not asked (a busy gateway spends nothing on probes); one in
    the middle of a stream that sent nothing for longer (a long prefill, or a hung engine) is. Its /metrics failing
    says nothing of its liveness: it stays in rotation."""
    import asyncio

    from server.engine.interface import EngineRequest, SamplingSettings

    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[_answer(tokenizer, "Up.")])
    worker = ScaleOutWorker(engine, SMALL, metrics_broken=True)
    with serve_asgi(worker) as port:
        remote = RemoteEngine(WorkerSet.of(SMALL, [f"http://127.0.0.1:{port}"]), tokenizer, health_seconds=60)
        remote.probe_all()  # up (its /v1/models read)
        seen = remote.workers.workers[0]

        async def run() -> list[int]:
            checks = []
            steps = remote.generate(EngineRequest("resp_1", [1, 2, 3], SamplingSettings(max_tokens=8)))
            await anext(steps)  # streaming, a byte just heard
            await remote._probe(seen, read_load=True)
            checks.append(worker.health_checks)
            seen.heard_at -= 61  # as after a prefill longer than an interval
            await remote._probe(seen, read_load=True)
            checks.append(worker.health_checks)
            assert [step async for step in steps]  # the stream ends
            await remote.shutdown()
            return checks

        assert asyncio.run(run()) == [0, 1]
        assert seen.in_rotation and seen.condition.value == "up"


def test_consecutive_failures_eject_a_worker_for_longer_each_time_within_the_share_and_panic_tries_all() -> None:
    from server.engine.workers import Condition, OutlierPolicy

    policy = OutlierPolicy(failures_to_eject=2, ejection_seconds=10, max_ejection_seconds=25, max_ejected_share=0.5)
    workers = WorkerSet.of(SMALL, [f"http://w{n}" for n in range(4)], policy=policy)
    for worker in workers.workers:
        worker.came_up()
    first, second, third, fourth = workers.workers
    workers.failed(first, "reset")
    assert first.condition is Condition.SUSPECTED and first.in_rotation
    first.answered()  # one success forgives
    assert first.condition is Condition.UP
    lengths = []
    for _ in range(3):
        workers.failed(first, "reset")
        workers.failed(first, "reset")
        assert first.condition is Condition.EJECTED and first not in workers.order("k")[:3]
        lengths.append(round(first.ejected_until - time.monotonic()))
        first.probe_passed()  # its time is not over: still out
        assert first.condition is Condition.EJECTED
        first.ejected_until = time.monotonic() - 1
        first.probe_passed()
        assert first.condition is Condition.UP
    assert lengths == [10, 20, 25]  # longer each time, up to the most
    for worker in (first, second, third):
        workers.failed(worker, "timeout")
        workers.failed(worker, "timeout")
    assert [worker.condition for worker in workers.workers] == [Condition.EJECTED, Condition.EJECTED,
                                                                 Condition.SUSPECTED, Condition.UP]  # two of four
    for worker in (third, fourth):
        worker.refused("gone")
    assert workers.alive() and workers.order("k")[0] in (first, second)  # panic: the ejected are tried
    for worker in (first, second):
        worker.refused("gone")
    assert not workers.alive() and len(workers.order("k")) == 4
    with pytest.raises(EngineUnavailable):
        workers.choose("k")


def test_one_worker_alone_is_never_ejected_and_a_health_check_must_fail_twice() -> None:
    """One `engines` URL (a router, a Service): a blip never takes the model out."""
    from server.engine.workers import Condition

    workers = WorkerSet.of(SMALL, ["http://router"])
    (router,) = workers.workers
    router.came_up()
    for _ in range(10):
        workers.failed(router, "reset")
    assert router.condition is Condition.SUSPECTED and workers.order(None) == [router]
    router.probe_failed("timed out")
    assert router.condition is Condition.SUSPECTED
    router.probe_failed("timed out")
    assert router.condition is Condition.DOWN
    router.probe_passed()
    assert router.condition is Condition.UP


def test_retries_in_flight_are_bounded_by_a_share_of_requests_in_flight() -> None:
    from server.engine.retries import RetryBudget

    budget = RetryBudget(share=0.2, minimum=3, requests=50)
    allowed = 0
    while budget.allows():
        budget.retries += 1
        allowed += 1
    assert allowed == 10
    assert RetryBudget(share=0.2, minimum=3, requests=1).allows()


def test_a_resumed_request_carries_the_output_so_far_and_counts_each_token_once() -> None:
    from server.engine.interface import EngineRequest, EngineStep, SamplingSettings
    from server.engine.resumption import Progress

    request = EngineRequest("r", [1, 2, 3], SamplingSettings(max_tokens=5))
    progress = Progress(request)
    assert progress.after_loss() == "restart" and progress.next_attempt() is request
    progress.seen(EngineStep([7, 8]))
    assert progress.after_loss() == "resume"
    peer = progress.next_attempt()
    assert peer is not None and peer.prompt_token_ids == [1, 2, 3, 7, 8] and peer.sampling.max_tokens == 3
    last = progress.seen(EngineStep([9], "stop", cached_tokens=5, prompt_tokens=5))
    assert (last.prompt_tokens, last.cached_tokens) == (3, 3)
    progress.seen(EngineStep([10, 11]))
    assert progress.next_attempt() is None  # the whole budget generated
    constrained = Progress(EngineRequest("c", [1], SamplingSettings(max_tokens=5, structural_tag="{}")))
    constrained.seen(EngineStep([4]))
    assert constrained.after_loss() == "lost"


CHECKS = [
    ("a key wanted, none given", {"api_key": "k1"}, None, r"wants a key \(it runs with --api-key\): name it with "
                                                         "`api_key_env` or `api_key_file`"),
    ("a key refused", {"api_key": "k1"}, "k2", "refused the key the fleet file names"),
    ("no scale-out API", {"scale_out": False}, None, "has no scale-out API .* start it with --enable-scale-out"),
    ("another tokenizer", {"tokenizer": "other"}, None, "tokenizes otherwise than the gateway's `path`"),
]


class _OtherTokenizer:
    """A tokenizer of another vocabulary: the same text, other ids (one model's worker behind another's path)."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [ord(character) for character in text]


@pytest.mark.parametrize("worker_settings, key, problem", [case[1:] for case in CHECKS], ids=[c[0] for c in CHECKS])
def test_a_worker_that_cannot_serve_the_model_as_declared_refuses_the_start_naming_the_fix(
        tokenizer: Any, worker_settings: dict[str, Any], key: str | None, problem: str,
        caplog: pytest.LogCaptureFixture) -> None:
    from server.engine.access import WorkerAccess

    settings = dict(worker_settings)
    if settings.get("tokenizer") == "other":
        settings["tokenizer"] = _OtherTokenizer()
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]])
    with serve_asgi(ScaleOutWorker(engine, SMALL, **settings)) as port:
        remote = RemoteEngine(WorkerSet.of(SMALL, [f"http://127.0.0.1:{port}"]), tokenizer,
                              access=WorkerAccess(key))
        with pytest.raises(WorkerMismatch, match=problem) as refused:
            remote.probe_all()
    assert key is None or key not in str(refused.value) + caplog.text


def test_a_worker_with_a_key_over_tls_serves_the_gateway(tokenizer: Any, tmp_path: Path) -> None:
    """https with the operator's CA, and the key as a bearer token on every request (generate and abort too); the
    same worker without the CA is not reached."""
    import asyncio

    from server.engine.access import WorkerAccess
    from server.engine.interface import EngineRequest, SamplingSettings

    cert, key_file = _self_signed(tmp_path)
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[_answer(tokenizer, "Sealed.")])
    worker = ScaleOutWorker(engine, SMALL, api_key="k1")
    with serve_asgi(worker, ssl_certfile=str(cert), ssl_keyfile=str(key_file)) as port:
        url = f"https://127.0.0.1:{port}"
        remote = RemoteEngine(WorkerSet.of(SMALL, [url]), tokenizer, access=WorkerAccess("k1", str(cert)))
        remote.probe_all()
        assert remote.workers.workers[0].in_rotation

        async def run() -> list[int]:
            request = EngineRequest("resp_tls", [1, 2, 3], SamplingSettings(max_tokens=8))
            tokens = [token async for step in remote.generate(request) for token in step.token_ids]
            await remote.shutdown()
            return tokens

        assert tokenizer.decode(asyncio.run(run()), skip_special_tokens=True) == "Sealed."
        untrusting = RemoteEngine(WorkerSet.of(SMALL, [url]), tokenizer, access=WorkerAccess("k1"))
        untrusting.probe_all()
        assert not untrusting.workers.in_rotation() and "not reachable" in (untrusting.workers.workers[0].problem or "")


def _self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1, signed by itself (its own CA), and its key."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "worker")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = folder / "worker.pem", folder / "worker.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file


def test_a_hot_key_spills_to_its_next_choice_past_the_load_bound_alike_on_every_gateway() -> None:
    """Rendezvous with bounded load: a worker running more than 1.25 times the mean passes a turn to the next of
    the key's order (the same next on every gateway), and takes its keys back once its load falls."""
    urls = [f"http://w{n}:8000" for n in range(4)]
    gateways = [WorkerSet.of(SMALL, urls, limits=LoadLimits(load_slack=0)),
                WorkerSet.of(SMALL, list(reversed(urls)), limits=LoadLimits(load_slack=0))]
    for workers in gateways:
        for worker in workers.workers:
            worker.came_up()
    home, second = (gateways[0].order("hot")[index].url for index in (0, 1))
    for workers in gateways:
        by_url = {worker.url: worker for worker in workers.workers}
        assert workers.choose("hot").url == home  # 1 <= ceil(1.25 * 1 / 4)
        by_url[home].running = 1
        assert workers.choose("hot").url == second  # 2 > ceil(1.25 * 2 / 4)
        for worker in workers.workers:
            worker.running = 2
        assert workers.choose("hot").url == home  # all alike: 3 <= ceil(1.25 * 9 / 4)
    unbounded = WorkerSet.of(SMALL, urls, limits=LoadLimits(load_bound=0))
    for worker in unbounded.workers:
        worker.came_up()
        worker.running = 9 if worker.url == home else 0
    assert unbounded.choose("hot").url == home


def test_a_small_imbalance_keeps_a_key_on_its_worker() -> None:
    """A worker spills only when it also runs `load_slack` more than the least loaded: eight turns more is nothing
    to a worker's batch, while a miss costs the whole prefix again (the check's chained turns, run eight at once,
    lost their cache so)."""
    workers = WorkerSet.of(SMALL, ["http://a", "http://b"])
    for worker in workers.workers:
        worker.came_up()
    home = workers.choose("k")
    home.running = 8
    assert workers.choose("k") is home
    home.running = 16
    assert workers.choose("k") is not home


def test_a_full_kv_cache_passes_a_turn_on_and_is_read_from_the_workers_metrics() -> None:
    workers = WorkerSet.of(SMALL, ["http://a", "http://b"])
    for worker in workers.workers:
        worker.came_up()
    home = workers.choose("k")
    workers.update_waiting(home, f'vllm:kv_cache_usage_perc{{engine="0",model_name="{SMALL}"}} 0.97\n'
                                 f'vllm:num_requests_waiting{{engine="0",model_name="{SMALL}"}} 1.0\n')
    assert (home.kv_usage, home.waiting) == (0.97, 1)
    assert workers.choose("k") is not home
    for worker in workers.workers:
        worker.kv_usage = 0.99
    assert workers.choose("k") is home  # every cache full: the key's own worker


def test_a_stateless_session_without_a_key_stays_on_the_worker_that_holds_its_prefix(
        fleet: Fleet, tokenizer: Any) -> None:
    """Each turn sends the whole history (store false, no prompt_cache_key, as Codex may): the session is keyed by
    its instructions and first user message, so its turns meet their prefix; other sessions spread."""
    fleet.play(SMALL, _answer(tokenizer, "Noted."))
    homes = []
    for session in range(16):  # (each lands on either worker by its key's hash: all 16 on one, 1 in 32,768)
        history: list[dict[str, Any]] = [{"role": "user", "content": f"Session {session}: list the files."}]
        sent = []
        for turn in range(3):
            before = _counts(fleet)
            final = validate_events(fleet.stream(input=history, instructions="You are a coding agent.", store=False))
            sent += _sent_to(fleet, before)
            history += [{"role": "assistant", "content": final.output_text},
                        {"role": "user", "content": f"And then {turn}?"}]
        assert len(set(sent)) == 1, sent
        homes.append(sent[0])
    assert set(homes) == {0, 1}


def test_past_the_per_worker_cap_requests_wait_and_take_turns_between_projects(tokenizer: Any) -> None:
    """One request at a time on the one worker: a project that sent four at once waits behind its own; another
    project's request, sent after them, goes second, not fifth."""
    import asyncio

    from server.engine.interface import EngineRequest, SamplingSettings

    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[_answer(tokenizer, "Taking turns.")], step_delay=0.05)
    worker = ScaleOutWorker(engine, SMALL)
    with serve_asgi(worker) as port:
        workers = WorkerSet.of(SMALL, [f"http://127.0.0.1:{port}"], limits=LoadLimits(max_running=1))
        remote = RemoteEngine(workers, tokenizer)
        remote.probe_all()

        async def one(name: str, project: str) -> None:
            request = EngineRequest(name, [1, 2, 3], SamplingSettings(max_tokens=8), project=project)
            assert [step async for step in remote.generate(request)]

        async def run() -> None:
            crowd = [asyncio.create_task(one(f"a{n}", "alpha")) for n in range(4)]
            await asyncio.sleep(0.01)
            assert len(remote.workers.queue) == 3  # one runs, three wait
            late = asyncio.create_task(one("b0", "beta"))
            await asyncio.gather(*crowd, late)
            await remote.shutdown()

        asyncio.run(run())
    started = [body["request_id"] for body in worker.bodies]
    assert started[0] == "a0" and started[1] == "b0" and sorted(started[2:]) == ["a1", "a2", "a3"], started


@pytest.mark.parametrize("second_goes_down", [False, True], ids=["second hangs", "second goes down"])
def test_a_stream_moved_once_goes_back_to_its_first_worker_when_the_second_fails_too(
        tokenizer: Any, tmp_path: Path, second_goes_down: bool) -> None:
    """A dies mid-stream (the stream goes on on B); A comes back; then B hangs, or goes down by its health checks
    (A is then the only worker in rotation): the stream goes on on A again, not lost for having tried A once (seen
    in bench/fleet_chaos.py: a SIGSTOP, then a black hole on the other)."""
    import threading

    with ExitStack() as stack:
        fleet = Fleet(tokenizer, stack, SEALER, tmp_path / "r.db", small_engine=_continuing(tokenizer),
                      limits=StallLimits(first_token_seconds=30, idle_seconds=3))
        home = _home(fleet, "k")
        first, second = fleet.workers[home], fleet.workers[1 - home]
        first.drop_after, second.hang_after = 2, 2

        def recover_later(sent: int) -> None:
            if sent == 1:  # A is down by now or soon (its /health fails twice); it recovers a second later
                threading.Timer(1.0, lambda: (setattr(first, "healthy", True),
                                              setattr(first, "drop_after", None))).start()
            if sent == 2 and second_goes_down:  # B's health fails from when it hangs, once A is back
                threading.Timer(2.0, lambda: setattr(second, "healthy", False)).start()

        second.on_chunk = recover_later
        events = fleet.stream(input="Where?", prompt_cache_key="k", max_output_tokens=100)
        assert events[-1]["type"] == "response.completed" and _deltas(events) == ANSWER
        assert len(first.bodies) == 2 and len(second.bodies) == 1  # A, B, then A again
