"""The official `anthropic` Python client (PyPI) against a running `stead serve`'s
`POST /v1/messages`, through the model router to the local model: whole and streamed answers,
tools with `tool_choice`, a tool result answered, the key as `x-api-key` and as a Bearer, and
Anthropic's error envelope.

Run by tests/local_model/vendor_clients.rs as `python anthropic_client.py BASE_URL KEY`; prints
one JSON line per check and exits non-zero on the first failure.
"""

import json
import sys

import anthropic

base, key = sys.argv[1], sys.argv[2]
client = anthropic.Anthropic(base_url=base, api_key=key, max_retries=0)
question = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
weather = {
    "name": "get_weather",
    "description": "Current weather of a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
tool_question = [{"role": "user", "content": "What is the weather in Paris?"}]


def check(name, condition, detail=None):
    print(json.dumps({"check": name, "ok": bool(condition), "detail": detail}, default=str), flush=True)
    if not condition:
        sys.exit(1)


raw = client.messages.with_raw_response.create(model="default", max_tokens=32, messages=question)
message = raw.parse()
text = "".join(b.text for b in message.content if b.type == "text")
check(
    "whole answer",
    "Paris" in text and message.stop_reason in ("end_turn", "max_tokens") and message.usage.output_tokens > 0,
    message.model_dump(),
)
check("router headers", raw.headers.get("x-stead-provider") == "local", dict(raw.headers))

pieces = []
with client.messages.stream(model="default", max_tokens=32, messages=question) as stream:
    for piece in stream.text_stream:
        pieces.append(piece)
    final = stream.get_final_message()
streamed = "".join(pieces)
check(
    "streamed answer",
    "Paris" in streamed and len(pieces) > 1 and final.content[0].text == streamed and final.usage.output_tokens > 0,
    {"text": streamed, "pieces": len(pieces), "stop": final.stop_reason},
)

called = client.messages.create(
    model="default",
    max_tokens=64,
    messages=tool_question,
    tools=[weather],
    tool_choice={"type": "tool", "name": "get_weather"},
)
uses = [b for b in called.content if b.type == "tool_use"]
check(
    "tool_use with tool_choice",
    called.stop_reason == "tool_use" and len(uses) == 1 and uses[0].name == "get_weather" and isinstance(uses[0].input.get("city"), str),
    called.model_dump(),
)

follow = client.messages.create(
    model="default",
    max_tokens=48,
    tools=[weather],
    # Without a system prompt the small local model repeats the call instead of answering.
    system="You are a helpful assistant. When a tool result is given, answer the user in one sentence using it.",
    messages=tool_question
    + [
        {"role": "assistant", "content": [u.model_dump() for u in uses]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "Sunny, 21 degrees Celsius."}]},
    ],
)
answer = "".join(b.text for b in follow.content if b.type == "text")
check("answers with the tool's result", "21" in answer or "unny" in answer, answer)

with client.messages.stream(
    model="default", max_tokens=64, messages=tool_question, tools=[weather], tool_choice={"type": "any"}
) as stream:
    final = stream.get_final_message()
uses = [b for b in final.content if b.type == "tool_use"]
check("streamed tool_use", final.stop_reason == "tool_use" and uses and uses[0].name == "get_weather", final.model_dump())

bearer = anthropic.Anthropic(base_url=base, auth_token=key, api_key=None, max_retries=0)
check("the key as a Bearer", bearer.messages.create(model="default", max_tokens=8, messages=question).content)

try:
    anthropic.Anthropic(base_url=base, api_key="wrong", max_retries=0).messages.create(
        model="default", max_tokens=8, messages=question
    )
    check("a wrong key is refused", False)
except anthropic.AuthenticationError as error:
    check("a wrong key is refused", error.status_code == 401 and error.body["error"]["type"] == "authentication_error", error.body)

try:
    client.messages.create(model="no-such-route", max_tokens=8, messages=question)
    check("an unknown route is 404", False)
except anthropic.NotFoundError as error:
    check("an unknown route is 404", error.body["type"] == "error" and error.body["error"]["type"] == "not_found_error", error.body)

try:
    client.messages.create(model="default", max_tokens=8, messages=[{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}])
    check("an image to a text-only route is refused", False)
except anthropic.UnprocessableEntityError as error:
    # The local model reads text only (docs/multimodal.md): 422, in Anthropic's envelope.
    refused = error.body["error"]
    check(
        "an image to a text-only route is refused",
        refused["type"] == "invalid_request_error" and refused["code"] == "images_unsupported",
        error.body,
    )
