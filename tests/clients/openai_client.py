"""The official `openai` Python client (PyPI) against a running `stead serve`, through the model
router to the local model: whole and streamed answers, with and without tools.

Run by tests/openai_client.rs as `python openai_client.py BASE_URL`; prints one JSON line per
check and exits non-zero on the first failure.
"""

import json
import os
import sys

import openai

base = sys.argv[1]
client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused-on-loopback", max_retries=0)
question = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
weather = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
tool_question = [{"role": "user", "content": "What is the weather in Paris?"}]


def check(name, condition, detail):
    print(json.dumps({"check": name, "ok": bool(condition), "detail": detail}), flush=True)
    if not condition:
        sys.exit(1)


models = [m.id for m in client.models.list().data]
check("models list the routes", "default" in models, models)

raw = client.chat.completions.with_raw_response.create(
    model="default", messages=question, max_tokens=32
)
answer = raw.parse()
check(
    "whole answer",
    "Paris" in (answer.choices[0].message.content or "") and answer.usage.completion_tokens > 0,
    answer.model_dump(),
)
check(
    "router headers",
    raw.headers.get("x-stead-provider") == "local" and raw.headers.get("x-stead-request-id"),
    dict(raw.headers),
)

pieces = []
finish = None
usage = None
for chunk in client.chat.completions.create(
    model="default",
    messages=question,
    max_tokens=32,
    stream=True,
    stream_options={"include_usage": True},
):
    if chunk.usage is not None:
        usage = chunk.usage
    for choice in chunk.choices:
        if choice.delta.content:
            pieces.append(choice.delta.content)
        if choice.finish_reason:
            finish = choice.finish_reason
text = "".join(pieces)
check(
    "streamed answer",
    "Paris" in text and len(pieces) > 1 and finish == "stop" and usage and usage.completion_tokens > 0,
    {"text": text, "pieces": len(pieces), "finish": finish},
)

called = client.chat.completions.create(
    model="default",
    messages=tool_question,
    tools=[weather],
    tool_choice="required",
    max_tokens=64,
)
calls = called.choices[0].message.tool_calls or []
check(
    "whole tool call",
    len(calls) == 1
    and calls[0].function.name == "get_weather"
    and isinstance(json.loads(calls[0].function.arguments).get("city"), str)
    and called.choices[0].finish_reason == "tool_calls",
    called.model_dump(),
)

streamed_calls = {}
finish = None
for chunk in client.chat.completions.create(
    model="default",
    messages=tool_question,
    tools=[weather],
    tool_choice={"type": "function", "function": {"name": "get_weather"}},
    max_tokens=64,
    stream=True,
):
    for choice in chunk.choices:
        for call in choice.delta.tool_calls or []:
            entry = streamed_calls.setdefault(call.index, {"name": "", "arguments": ""})
            if call.function.name:
                entry["name"] = call.function.name
            if call.function.arguments:
                entry["arguments"] += call.function.arguments
        if choice.finish_reason:
            finish = choice.finish_reason
check(
    "streamed tool call",
    list(streamed_calls) == [0]
    and streamed_calls[0]["name"] == "get_weather"
    and isinstance(json.loads(streamed_calls[0]["arguments"]).get("city"), str)
    and finish == "tool_calls",
    {"calls": streamed_calls, "finish": finish},
)

try:
    client.chat.completions.create(model="no-such-route", messages=question)
    check("unknown model is refused", False, "no error")
except openai.NotFoundError as error:
    check("unknown model is refused", error.status_code == 404, str(error))

# Embeddings through the `embed` route (the local all-MiniLM-L6-v2): the client asks for
# base64 by default and decodes it; floats when asked. Unit vectors of 384 dimensions, and
# meaning ranks: a question is nearer its answer than an unrelated text.
texts = [
    "How hot should the water be for green tea?",
    "Green tea is steeped at 80 degrees Celsius.",
    "Patch the inner tube to fix a flat bicycle tyre.",
]
embedded = client.embeddings.create(model="embed", input=texts)
vectors = [d.embedding for d in embedded.data]
dot = lambda a, b: sum(x * y for x, y in zip(a, b))
check(
    "embeddings (base64, the client's default)",
    len(vectors) == 3
    and all(len(v) == 384 for v in vectors)
    and all(abs(dot(v, v) - 1.0) < 1e-3 for v in vectors)
    and dot(vectors[0], vectors[1]) > dot(vectors[0], vectors[2]) + 0.2
    and embedded.usage.prompt_tokens > 0,
    {"dims": [len(v) for v in vectors], "sims": [dot(vectors[0], vectors[1]), dot(vectors[0], vectors[2])]},
)
floats = client.embeddings.create(model="embed", input=texts[0], encoding_format="float")
check(
    "embeddings as floats equal the decoded base64",
    max(abs(a - b) for a, b in zip(floats.data[0].embedding, vectors[0])) < 1e-6,
    floats.usage.model_dump(),
)

# Speech to text with the local Whisper model, as OpenAI's clients ask for it (`whisper-1`,
# a FLAC file), and the text-only answer.
clip = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "speech", "librivox-0930.flac")
with open(clip, "rb") as audio:
    heard = client.audio.transcriptions.create(model="whisper-1", file=audio)
check(
    "a transcription (whisper-1, FLAC)",
    "amiable" in heard.text.lower() and "himself" in heard.text.lower(),
    heard.model_dump(),
)
with open(clip, "rb") as audio:
    plain = client.audio.transcriptions.create(model="whisper", file=audio, response_format="text")
check("a transcription as text", str(plain).strip() == heard.text.strip(), str(plain))
