"""`service_tier` through the real app and the openai SDK: each tier a step in the engine's priority from the key's
or project's, the served tier echoed, a value that is no tier a 400 naming it."""

from __future__ import annotations

import hashlib
from typing import Any, Iterator

import httpx
import openai
import pytest

from server.config import ServerConfig
from server.http.app import create_app
from server.runs.context import ServingContext
from server.tenancy.keys import ApiKey
from server.tenancy.projects_file import ProjectsFile
from tests.conftest import serve_in_thread
from tests.scripted_engine import ScriptedEngine, steps_from_tokens
from tests.test_server import MODEL

BATCH_KEY = "sk-batch"


@pytest.fixture(scope="module")
def served(tokenizer: Any) -> Iterator[tuple[str, ScriptedEngine]]:
    answer = steps_from_tokens(tokenizer.encode("Paris.", add_special_tokens=False) + [tokenizer.eos_token_id],
                               cuts=[1])
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[answer])
    batch = ApiKey(id="file_batch", name="nightly", project="alpha", hash=hashlib.sha256(BATCH_KEY.encode()).hexdigest())
    projects = ProjectsFile((batch,), key_priorities={"file_batch": 10})
    context = ServingContext(config=ServerConfig(served_model_name=MODEL, projects=projects),
                             engine_factory=lambda: engine)
    with serve_in_thread(create_app(context)) as base_url:
        yield base_url, engine


@pytest.mark.parametrize("asked, served_as, step", [
    (None, "default", 0), ("auto", "default", 0), ("default", "default", 0), ("flex", "flex", 1),
    ("priority", "priority", -1), ("scale", "default", 0), ("fast", "priority", -1)])
def test_each_tier_is_a_step_in_the_engines_priority_from_the_keys_and_is_echoed_as_served(
        served: tuple[str, ScriptedEngine], asked: str | None, served_as: str, step: int) -> None:
    base_url, engine = served
    client = openai.OpenAI(base_url=base_url, api_key=BATCH_KEY, max_retries=0)
    extra = {} if asked is None else {"service_tier": asked}
    response = client.responses.create(model=MODEL, input="Capital of France?", **extra)  # type: ignore[arg-type]
    assert response.service_tier == served_as and engine.requests[-1].priority == 10 + step
    with client.responses.stream(model=MODEL, input="Capital of France?", **extra) as stream:  # type: ignore[arg-type]
        events = list(stream)
    assert events[0].response.service_tier == served_as  # type: ignore[union-attr]
    assert stream.get_final_response().service_tier == served_as


def test_a_value_that_is_no_tier_is_a_400_naming_it(served: tuple[str, ScriptedEngine]) -> None:
    base_url, _ = served
    answer = httpx.post(f"{base_url}/responses", json={"model": MODEL, "input": "hi", "service_tier": "turbo"},
                        headers={"Authorization": f"Bearer {BATCH_KEY}"})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "service_tier"
    assert "`turbo`" in answer.json()["error"]["message"]
