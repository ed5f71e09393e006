"""The official `openai` Python client (PyPI) against a running `stead serve`'s stateless
`POST /v1/responses`, through the model router to the local model: a whole and a streamed
answer, a function call forced with `tool_choice`, its output answered, and what is refused.

Run by tests/local_model/vendor_clients.rs as `python responses_client.py BASE_URL KEY`; prints
one JSON line per check and exits non-zero on the first failure.
"""

import json
import sys

import openai

base, key = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0)
weather = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather of a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def check(name, condition, detail=None):
    print(json.dumps({"check": name, "ok": bool(condition), "detail": detail}, default=str), flush=True)
    if not condition:
        sys.exit(1)


response = client.responses.create(
    model="default", input="What is the capital of France? Answer in one sentence.", max_output_tokens=32
)
check(
    "whole answer",
    "Paris" in response.output_text and response.status in ("completed", "incomplete") and response.usage.output_tokens > 0,
    response.model_dump(),
)

events = list(
    client.responses.create(
        model="default",
        instructions="You are a geography teacher.",
        input=[{"role": "user", "content": [{"type": "input_text", "text": "What is the capital of France?"}]}],
        max_output_tokens=32,
        stream=True,
    )
)
types = [e.type for e in events]
deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
done = events[-1]
check(
    "streamed answer",
    types[0] == "response.created"
    and types.count("response.output_text.delta") > 1
    and done.type in ("response.completed", "response.incomplete")
    and done.response.output_text == deltas
    and "Paris" in deltas
    and [e.sequence_number for e in events] == list(range(len(events))),
    {"types": sorted(set(types)), "text": deltas},
)

called = client.responses.create(
    model="default",
    input="What is the weather in Paris?",
    tools=[weather],
    tool_choice={"type": "function", "name": "get_weather"},
    max_output_tokens=64,
)
calls = [item for item in called.output if item.type == "function_call"]
check(
    "function call with tool_choice",
    len(calls) == 1 and calls[0].name == "get_weather" and isinstance(json.loads(calls[0].arguments).get("city"), str),
    called.model_dump(),
)

answered = client.responses.create(
    model="default",
    input=[
        {"role": "user", "content": "What is the weather in Paris?"},
        calls[0].model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": "Sunny, 21 degrees Celsius."},
    ],
    tools=[weather],
    tool_choice="none",
    # Without instructions the small local model repeats the call instead of answering.
    instructions="You are a helpful assistant. When a tool result is given, answer the user in one sentence using it.",
    max_output_tokens=48,
)
check("answers with the function's output", "21" in answered.output_text or "unny" in answered.output_text, answered.output_text)

streamed_call = list(
    client.responses.create(
        model="default", input="What is the weather in Paris?", tools=[weather], tool_choice="required", stream=True, max_output_tokens=64
    )
)
final = streamed_call[-1].response
check(
    "streamed function call",
    any(e.type == "response.function_call_arguments.done" for e in streamed_call)
    and any(item.type == "function_call" for item in final.output),
    sorted({e.type for e in streamed_call}),
)

try:
    client.responses.create(model="default", input="Hi", previous_response_id=response.id)
    check("previous_response_id is refused", False)
except openai.BadRequestError as error:
    check("previous_response_id is refused", "stateless" in str(error), str(error))
