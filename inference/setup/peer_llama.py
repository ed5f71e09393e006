#!/usr/bin/env python3
"""llama.cpp (llama-cpp-python) beside Stead's converted model, on the same GGUF.

    python peer_llama.py agreement --gguf FILE --model-dir DIR [--repeat N] [--threads T]
    python peer_llama.py bench --gguf FILE --prompt-ids JSON --max-tokens N --runs R [--threads T]
    python peer_llama.py turn --gguf FILE --steps-ids JSON [--threads T]

Written against llama-cpp-python 0.3.36 (llama-requirements.txt). Each command prints one
JSON line.

agreement: teacher-forced top-1 agreement between llama.cpp and the converted model.onnx
  (run by onnxruntime, one prefill pass) over the same token ids: the fixed passage below in
  the model's chat format, tokenized with the model directory's tokenizer.json. Quantization
  differs (llama.cpp runs the GGUF's own blocks; the ONNX model re-quantizes dequantized
  weights to int4 k-quant), so equal free-running text is not expected: the share of
  positions whose most likely next token is the same is the measure. --repeat N runs the
  passage N times in a row (a longer context: past a sliding window, for instance).

bench: the single-stream figures of `stead bench inference` for llama.cpp: TTFT p50/p99 of a
  cold prompt (the context is reset before each run) and decode tok/s (median of
  (N - 1) / time after the first token), greedy, end-of-sequence ignored.

turn: time to first token of each step of an agent turn (the prompts' token ids, one list a
  step, as Stead rendered them), without and with llama.cpp's prompt cache: reset before
  each step, or kept, so that the prefix shared with the previous step is not evaluated again.
"""

import argparse
import json
import statistics
import sys
import time

import numpy as np

PASSAGE = [
    ("system", "You are a helpful assistant. Answer briefly and exactly."),
    ("user", "Explain in a few sentences why the sky is blue, then write a short Python function that "
             "returns the factorial of n, and finally give me a JSON object with the keys city and country "
             "for the capital of France."),
    ("assistant", "Sunlight is made of many colours. When it passes through the atmosphere, the short blue "
                  "wavelengths are scattered by the gas molecules much more than the long red ones, so blue "
                  "light reaches our eyes from every direction of the sky. At sunset the light travels through "
                  "more air, the blue is scattered away, and the sky turns orange and red.\n\n"
                  "```python\ndef factorial(n: int) -> int:\n    result = 1\n    for i in range(2, n + 1):\n"
                  "        result *= i\n    return result\n```\n\n"
                  "{\"city\": \"Paris\", \"country\": \"France\"}"),
    ("user", "Thank you. Now remember that my meeting with Anna is on Friday at 3 pm, and tell me what "
             "you will do with that note."),
    ("assistant", "I will store a note saying that your meeting with Anna is on Friday at 3 pm, so that I "
                  "can remind you of it later when you ask about your week."),
]


def chatml(messages):
    return "".join(f"<|im_start|>{role}\n{text}<|im_end|>\n" for role, text in messages)


def load_llama(gguf, threads, n_ctx, logits_all=False):
    from llama_cpp import Llama

    return Llama(
        model_path=gguf, n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, n_batch=512,
        logits_all=logits_all, verbose=False,
    )


def agreement(args):
    import onnxruntime as ort
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(f"{args.model_dir}/tokenizer.json")
    with open(f"{args.model_dir}/stead_model.json") as f:
        config = json.load(f)
    text = chatml(PASSAGE) * args.repeat
    ids = tokenizer.encode(text, add_special_tokens=False).ids

    llm = load_llama(args.gguf, args.threads, n_ctx=len(ids) + 8, logits_all=True)
    llm.eval(ids)
    reference = np.asarray(llm.scores[: len(ids)], dtype=np.float32).argmax(axis=-1)

    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    session = ort.InferenceSession(f"{args.model_dir}/model.onnx", options)
    heads, dim = config["num_kv_heads"], config["head_dim"]
    feeds = {
        "input_ids": np.asarray([ids], dtype=np.int64),
        "attention_mask": np.ones((1, len(ids)), dtype=np.int64),
    }
    for i in range(config["num_layers"]):
        for kind in ("key", "value"):
            feeds[f"past_key_values.{i}.{kind}"] = np.zeros((1, heads, 0, dim), dtype=np.float32)
    logits = session.run(["logits"], feeds)[0][0]
    ours = logits.argmax(axis=-1)

    same = ours == reference
    # The tokenizer check: llama.cpp's own split of the same text (special tokens parsed).
    theirs = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
    print(json.dumps({
        "architecture": config.get("architecture"),
        "model": config.get("name"),
        "same_tokens": list(theirs) == list(ids),
        "positions": int(len(ids)),
        "agreement": float(same.mean()),
        "disagreements": int((~same).sum()),
    }), flush=True)


def first_token_ms(llm, ids, cached):
    """Time to the first token of `ids`: from an empty context, or (cached) reusing the longest
    prefix shared with the previous prompt, which llama-cpp-python's generate(reset=True) keeps
    in the context and does not evaluate again."""
    if not cached:
        llm.reset()
    started = time.perf_counter()
    generator = llm.generate(ids, top_k=1, temp=0.0, reset=True)
    next(generator)
    elapsed = (time.perf_counter() - started) * 1e3
    generator.close()
    return elapsed


def bench(args):
    with open(args.prompt_ids) as f:
        ids = json.load(f)
    llm = load_llama(args.gguf, args.threads, n_ctx=len(ids) + args.max_tokens + 8)
    # generate() does not stop at end-of-sequence: exactly N tokens, as the other sides do.
    ttft, decode = [], []
    for run in range(args.runs + 1):
        llm.reset()
        started = time.perf_counter()
        produced, first = 0, None
        for _ in llm.generate(ids, top_k=1, temp=0.0, reset=True):
            produced += 1
            if first is None:
                first = time.perf_counter()
            if produced >= args.max_tokens:
                break
        done = time.perf_counter()
        if run == 0:
            continue  # warm-up
        ttft.append((first - started) * 1e3)
        if produced > 1:
            decode.append((produced - 1) / (done - first))
        print(f"progress: {run}/{args.runs} runs", file=sys.stderr, flush=True)
    ttft.sort()
    print(json.dumps({
        "ttft_ms_p50": statistics.median(ttft),
        "ttft_ms_p99": ttft[min(len(ttft) - 1, round(0.99 * (len(ttft) - 1)))],
        "decode_tok_s": statistics.median(decode),
        "prompt_tokens": len(ids),
        "runs": args.runs,
    }), flush=True)


def turn(args):
    with open(args.steps_ids) as f:
        steps = json.load(f)
    llm = load_llama(args.gguf, args.threads, n_ctx=max(len(s) for s in steps) + 16)
    first_token_ms(llm, steps[0][:16], cached=False)  # warm-up
    off = [first_token_ms(llm, ids, cached=False) for ids in steps]
    llm.reset()
    on = [first_token_ms(llm, ids, cached=True) for ids in steps]
    later = lambda values: statistics.median(values[1:]) if len(values) > 1 else 0.0
    print(json.dumps({
        "ttft_ms_off": off,
        "ttft_ms_on": on,
        "later_steps_ttft_ms_p50_off": later(off),
        "later_steps_ttft_ms_p50_on": later(on),
    }), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    a = commands.add_parser("agreement")
    a.add_argument("--gguf", required=True)
    a.add_argument("--model-dir", required=True)
    a.add_argument("--repeat", type=int, default=1)
    b = commands.add_parser("bench")
    b.add_argument("--gguf", required=True)
    b.add_argument("--prompt-ids", required=True, help="a JSON file: the prompt's token ids")
    b.add_argument("--max-tokens", type=int, default=64)
    b.add_argument("--runs", type=int, default=10)
    t = commands.add_parser("turn")
    t.add_argument("--gguf", required=True)
    t.add_argument("--steps-ids", required=True, help="a JSON file: one list of token ids per step")
    for p in (a, b, t):
        p.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    {"agreement": agreement, "bench": bench, "turn": turn}[args.command](args)


if __name__ == "__main__":
    main()
