#!/usr/bin/env python3
"""The benchmark peer for `stead bench inference`: the same model.onnx run by onnxruntime-genai.

    python peer_genai_bench.py --model DIR --prompt TEXT --max-tokens N --runs R --concurrency C

Written against onnxruntime-genai 0.18.0 on onnxruntime 1.31.1 (peer-requirements.txt).

The prompt is wrapped in the model's chat template as one user message. Decoding is greedy
and always produces exactly N tokens (end-of-sequence is suppressed), so every run does
the same work. After one warm-up run it measures:

- R single-stream runs: TTFT (prompt in to first token out) p50/p99, and decode_tok_s,
  the median of (N - 1) / (time after the first token);
- R runs of C streams decoded together as one batch of C rows, which is how
  onnxruntime-genai decodes several sequences at once on CPU: aggregate_tok_s is the
  median of C * N / (wall time of the batch run).

Session options use 2 intra-op threads and 1 inter-op thread unless --threads says otherwise.
Prints one JSON line.
"""

import argparse
import json
import statistics
import time

import numpy as np
import onnxruntime_genai as og


def percentile(values, q):
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def load_model(model_dir, threads):
    config = og.Config(model_dir)
    config.clear_providers()  # CPU
    options = {"intra_op_num_threads": threads, "inter_op_num_threads": 1}
    config.overlay(json.dumps({"model": {"decoder": {"session_options": options}}}))
    return og.Model(config)


def run_once(model, prompt_ids, max_tokens, batch):
    """Greedy-decode max_tokens for `batch` copies of the prompt.

    Returns (ttft seconds, seconds after the first token, total seconds).
    """
    length = len(prompt_ids) + max_tokens
    params = og.GeneratorParams(model)
    params.set_search_options(
        do_sample=False, batch_size=batch, max_length=length, min_length=length, past_present_share_buffer=True
    )
    generator = og.Generator(model, params)
    started = time.perf_counter()
    generator.append_tokens(np.tile(np.asarray(prompt_ids, dtype=np.int32), (batch, 1)))
    generator.generate_next_token()
    first = time.perf_counter()
    produced = 1
    while produced < max_tokens:
        generator.generate_next_token()
        produced += 1
    done = time.perf_counter()
    return first - started, done - first, done - started


def main():
    parser = argparse.ArgumentParser(description="onnxruntime-genai peer benchmark")
    parser.add_argument("--model", required=True, help="model directory with genai_config.json")
    parser.add_argument("--prompt", required=True, help="user message, wrapped in the chat template")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads (default 2)")
    args = parser.parse_args()
    if args.max_tokens < 2 or args.runs < 1 or args.concurrency < 1:
        parser.error("need --max-tokens >= 2, --runs >= 1, --concurrency >= 1")

    model = load_model(args.model, args.threads)
    tokenizer = og.Tokenizer(model)
    messages = json.dumps([{"role": "user", "content": args.prompt}])
    prompt_ids = tokenizer.encode(tokenizer.apply_chat_template(messages, add_generation_prompt=True))

    run_once(model, prompt_ids, args.max_tokens, 1)  # warm-up: allocation and weight pre-packing
    single = [run_once(model, prompt_ids, args.max_tokens, 1) for _ in range(args.runs)]
    ttft_ms = [s[0] * 1000 for s in single]
    decode = [(args.max_tokens - 1) / s[1] for s in single]
    if args.concurrency == 1:
        aggregate = [args.max_tokens / s[2] for s in single]
    else:
        run_once(model, prompt_ids, args.max_tokens, args.concurrency)  # warm-up at this batch size
        batched = [run_once(model, prompt_ids, args.max_tokens, args.concurrency) for _ in range(args.runs)]
        aggregate = [args.concurrency * args.max_tokens / b[2] for b in batched]

    print(
        json.dumps(
            {
                "ttft_ms_p50": round(statistics.median(ttft_ms), 2),
                "ttft_ms_p99": round(percentile(ttft_ms, 99), 2),
                "decode_tok_s": round(statistics.median(decode), 2),
                "aggregate_tok_s": round(statistics.median(aggregate), 2),
                "runs": args.runs,
                "concurrency": args.concurrency,
                "prompt_tokens": len(prompt_ids),
                "max_tokens": args.max_tokens,
                "threads": args.threads,
                "peer": f"onnxruntime-genai {og.__version__}",
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
