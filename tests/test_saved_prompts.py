"""Reusable prompts (issue 55 item 4): a project's prompts, versioned (`/v1/prompts`, this server's extension), and
`prompt: {id, version, variables}` on `responses.create` through the openai SDK: filled, put before the history,
echoed as OpenAI echoes it; a missing variable, an unknown prompt or version a 400 naming it."""

from __future__ import annotations

from typing import Any, Iterator

import httpx
import openai
import pytest

from conformance.contract import validate_events
from server.saved_prompts.prompt import SavedPrompt
from server.saved_prompts.templates import filled
from tests.test_server import Harness
from tests.test_store import say, served

INSTRUCTIONS = "You are a guide to {{city}}. Answer in {{ language }}."
ITEMS = [{"type": "message", "role": "user", "content": "I am planning a trip to {{city}}."},
         {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Noted."}]}]


@pytest.fixture
def harness(tokenizer: Any, store_url: str) -> Iterator[Harness]:
    engine, server = served(tokenizer, store_url)
    with server as base_url:
        yield Harness(engine, base_url)


def made(harness: Harness, path: str = "/prompts", **body: Any) -> dict[str, Any]:
    answer = httpx.post(f"{harness.base_url}{path}", json=body, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


def prompt_text(harness: Harness, tokenizer: Any) -> str:
    return str(tokenizer.decode(harness.engine.requests[-1].prompt_token_ids))


def test_a_prompt_is_filled_before_the_input_and_echoed(harness: Harness, tokenizer: Any) -> None:
    prompt = made(harness, instructions=INSTRUCTIONS, input=ITEMS)
    assert prompt["id"].startswith("pmpt_") and prompt["version"] == "1"
    assert prompt["variables"] == ["city", "language"]
    harness.play(say(tokenizer, "Visit the Louvre."))
    variables = {"city": "Paris", "language": "French"}
    response = harness.client.responses.create(prompt={"id": prompt["id"], "variables": variables},
                                               input="What should I see first?")
    seen = prompt_text(harness, tokenizer)
    assert "You are a guide to Paris. Answer in French." in seen and "{{" not in seen
    assert seen.index("I am planning a trip to Paris.") < seen.index("Noted.") < seen.index("What should I see first")
    assert response.output_text == "Visit the Louvre."
    assert response.prompt is not None and (response.prompt.id, response.prompt.version) == (prompt["id"], "1")
    assert response.prompt.variables == variables
    assert isinstance(response.instructions, list) and len(response.instructions) == 3  # as OpenAI echoes a prompt
    developer = response.instructions[0]
    assert developer.role == "developer" and developer.content[0].text == "You are a guide to Paris. Answer in French."
    stored = harness.client.responses.retrieve(response.id)
    assert stored.prompt == response.prompt and stored.instructions == response.instructions
    assert [item.content[0].text for item in harness.client.responses.input_items.list(response.id).data] == \
        ["What should I see first?"]  # the prompt is the response's instructions, not its input

    harness.play(say(tokenizer, "Then Montmartre."))
    events = harness.raw_stream(prompt={"id": prompt["id"], "variables": variables}, input="And then?",
                                previous_response_id=response.id)
    final = validate_events(events)  # every event, and the echoed prompt, as the SDK and the contract read them
    assert final.prompt is not None and final.prompt.version == "1"
    chained = prompt_text(harness, tokenizer)
    assert chained.count("You are a guide to Paris.") == 1 and "What should I see first?" in chained


def test_versions_the_latest_unless_one_is_named(harness: Harness, tokenizer: Any) -> None:
    first = made(harness, instructions="Version one: be {{mood}}.")
    second = made(harness, f"/prompts/{first['id']}/versions", instructions="Version two: be {{mood}}.")
    assert (second["id"], second["version"]) == (first["id"], "2")
    for version, expected in ((None, "Version two: be brief."), ("1", "Version one: be brief."),
                              ("2", "Version two: be brief.")):
        harness.play(say(tokenizer, "Yes."))
        reference: dict[str, Any] = {"id": first["id"], "variables": {"mood": "brief"}}
        if version is not None:
            reference["version"] = version
        response = harness.client.responses.create(prompt=reference, input="Hi")  # type: ignore[arg-type]
        assert expected in prompt_text(harness, tokenizer)
        assert response.prompt is not None and response.prompt.version == (version or "2")
    listed = httpx.get(f"{harness.base_url}/prompts").json()["data"]
    assert [(p["id"], p["version"]) for p in listed] == [(first["id"], "2")]
    versions = httpx.get(f"{harness.base_url}/prompts/{first['id']}/versions").json()["data"]
    assert [p["instructions"] for p in versions] == ["Version one: be {{mood}}.", "Version two: be {{mood}}."]
    assert httpx.get(f"{harness.base_url}/prompts/{first['id']}", params={"version": 1}).json()["version"] == "1"


def test_a_missing_variable_an_unknown_prompt_or_version_is_a_400_naming_it(harness: Harness) -> None:
    prompt = made(harness, instructions=INSTRUCTIONS)
    cases = [({"id": prompt["id"], "variables": {"city": "Rome"}}, "prompt.variables", "language"),
             ({"id": "pmpt_unknown"}, "prompt.id", "pmpt_unknown"),
             ({"id": prompt["id"], "version": "7", "variables": {"city": "Rome", "language": "Latin"}},
              "prompt.version", "7"),
             ({"id": prompt["id"], "variables": {"city": {"type": "input_audio"}, "language": "x"}},
              "prompt.variables", "city")]
    for reference, param, named in cases:
        with pytest.raises(openai.BadRequestError) as refused:
            harness.client.responses.create(prompt=reference, input="Hi")  # type: ignore[arg-type]
        error = refused.value.body
        assert isinstance(error, dict) and error["param"].startswith(param), error
        assert named in error["message"], error
    assert httpx.post(f"{harness.base_url}/prompts", json={}).status_code == 400
    bad_item = httpx.post(f"{harness.base_url}/prompts", json={"input": [{"type": "message", "role": "wizard",
                                                                          "content": "hi"}]})
    assert bad_item.status_code == 400 and bad_item.json()["error"]["param"].startswith("input")
    assert httpx.get(f"{harness.base_url}/prompts/pmpt_unknown").status_code == 404


def test_an_image_or_file_variable_takes_the_place_of_its_name() -> None:
    prompt = SavedPrompt("pmpt_x", 1, "default", None, [{"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "Compare {{photo}} with {{notes}}, {{who}}."}]}], 0)
    image = {"type": "input_image", "image_url": "https://example.com/a.png"}
    notes = {"type": "input_file", "file_id": "file-1"}
    [item] = filled(prompt, {"photo": image, "notes": notes, "who": {"type": "input_text", "text": "Ada"}}).items
    assert item["content"] == [{"type": "input_text", "text": "Compare "}, image, {"type": "input_text", "text": " with "},
                               notes, {"type": "input_text", "text": ", Ada."}]
