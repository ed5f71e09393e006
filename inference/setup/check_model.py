#!/usr/bin/env python3
"""Check a converted model directory with Python onnxruntime.

    python check_model.py --model DIR [--threads 2] [--max-tokens 32]

1. Renders the chat template for "What is the capital of France?", greedy-decodes with the
   KV cache, prints the answer, TTFT and decode tokens/s; the answer must name Paris.
2. Decodes two prompts of different lengths together in one batch (one right-padded KV
   buffer, per-row attention masks, as the Rust engine does) and checks that every row
   yields the same greedy tokens as when it runs alone.

Exits non-zero with a one-line message when a check fails.
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import onnxruntime as ort
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

QUESTION = "What is the capital of France?"
EXPECTED = "Paris"
BATCH_PROMPTS = ("Name three primary colors.", "Write one sentence about the sea, the wind and the small boats in the harbour.")
BATCH_STEPS = 16


def _raise(message):
    raise ValueError(message)


class Model:
    def __init__(self, model_dir, threads):
        with open(os.path.join(model_dir, "stead_model.json"), encoding="utf-8") as f:
            self.config = json.load(f)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        started = time.perf_counter()
        self.session = ort.InferenceSession(
            os.path.join(model_dir, "model.onnx"), options, providers=["CPUExecutionProvider"]
        )
        self.load_s = time.perf_counter() - started
        self.tokenizer = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
        with open(os.path.join(model_dir, "tokenizer_config.json"), encoding="utf-8") as f:
            tokenizer_config = json.load(f)
        self.bos_token = tokenizer_config.get("bos_token", "")
        self.eos_token = tokenizer_config.get("eos_token", "")
        # Rendered the way transformers' apply_chat_template does.
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = _raise
        with open(os.path.join(model_dir, "chat_template.jinja"), encoding="utf-8") as f:
            self.template = env.from_string(f.read())
        self.layers = self.config["num_layers"]
        self.kv_heads = self.config["num_kv_heads"]
        self.head_dim = self.config["head_dim"]
        self.eos = set(self.config["eos_token_ids"])
        self.present_names = [o.name for o in self.session.get_outputs() if o.name.startswith("present.")]

    def prompt_ids(self, text):
        rendered = self.template.render(
            messages=[{"role": "user", "content": text}],
            add_generation_prompt=True,
            bos_token=self.bos_token,
            eos_token=self.eos_token,
        )
        # The template writes every special token itself.
        return self.tokenizer.encode(rendered, add_special_tokens=False).ids

    def empty_cache(self, batch):
        shape = (batch, self.kv_heads, 0, self.head_dim)
        return {
            f"past_key_values.{i}.{kind}": np.zeros(shape, np.float32)
            for i in range(self.layers)
            for kind in ("key", "value")
        }

    def step(self, input_ids, attention_mask, cache):
        """Run the decoder; returns logits of each row's last input token and the new cache."""
        feeds = {"input_ids": input_ids, "attention_mask": attention_mask, **cache}
        outputs = self.session.run(["logits", *self.present_names], feeds)
        new_cache = {name.replace("present.", "past_key_values."): value for name, value in zip(self.present_names, outputs[1:])}
        return outputs[0][:, -1, :], new_cache

    def generate(self, ids, max_tokens, stop_at_eos=True):
        """Greedy decoding of one row. Returns (tokens, ttft seconds, decode seconds)."""
        started = time.perf_counter()
        mask = np.ones((1, len(ids)), np.int64)
        logits, cache = self.step(np.array([ids], np.int64), mask, self.empty_cache(1))
        tokens = [int(logits[0].argmax())]
        ttft = time.perf_counter() - started
        while len(tokens) < max_tokens and not (stop_at_eos and tokens[-1] in self.eos):
            mask = np.ones((1, mask.shape[1] + 1), np.int64)
            logits, cache = self.step(np.array([[tokens[-1]]], np.int64), mask, cache)
            tokens.append(int(logits[0].argmax()))
        return tokens, ttft, time.perf_counter() - started - ttft

    def generate_batch(self, prompts, steps):
        """Greedy decoding of several rows in one batch, each prefilled alone first.

        The rows' caches are right-padded with zeros into one [batch, kv_heads, max_len,
        head_dim] buffer; each row's attention mask is its valid length plus one ones
        (the token being fed) followed by zeros. The graph reads every row's length from
        its mask, so the padding is never attended to.
        """
        lengths, first_tokens, caches = [], [], []
        for ids in prompts:
            logits, cache = self.step(np.array([ids], np.int64), np.ones((1, len(ids)), np.int64), self.empty_cache(1))
            lengths.append(len(ids))
            first_tokens.append(int(logits[0].argmax()))
            caches.append(cache)
        width = max(lengths)
        cache = {
            name: np.concatenate(
                [np.pad(c[name], ((0, 0), (0, 0), (0, width - c[name].shape[2]), (0, 0))) for c in caches]
            )
            for name in caches[0]
        }
        rows = [[t] for t in first_tokens]
        for _ in range(steps - 1):
            width = next(iter(cache.values())).shape[2]
            mask = np.zeros((len(rows), width + 1), np.int64)
            for r, length in enumerate(lengths):
                mask[r, : length + 1] = 1
            input_ids = np.array([[row[-1]] for row in rows], np.int64)
            logits, cache = self.step(input_ids, mask, cache)
            for r, row in enumerate(rows):
                row.append(int(logits[r].argmax()))
                lengths[r] += 1
        return rows


def main():
    parser = argparse.ArgumentParser(description="Check a converted model directory with onnxruntime.")
    parser.add_argument("--model", required=True, help="model directory written by convert_gguf.py")
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads (default 2)")
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args()

    model = Model(args.model, args.threads)
    print(f"model: {model.config['name']} ({model.config['precision']}), session load {model.load_s * 1000:.0f} ms", flush=True)

    ids = model.prompt_ids(QUESTION)
    model.generate(ids, 4)  # warm-up: first runs allocate and pre-pack
    tokens, ttft, decode_s = model.generate(ids, args.max_tokens)
    text = model.tokenizer.decode(tokens, skip_special_tokens=True)
    decode_tps = (len(tokens) - 1) / decode_s if len(tokens) > 1 else 0.0
    print(f"prompt: {QUESTION!r} ({len(ids)} tokens)")
    print(f"answer: {text!r}")
    print(f"{len(tokens)} tokens, TTFT {ttft * 1000:.1f} ms, decode {decode_tps:.1f} tok/s ({args.threads} threads)", flush=True)
    if EXPECTED not in text:
        sys.exit(f"FAIL: the answer does not mention {EXPECTED}")

    prompts = [model.prompt_ids(p) for p in BATCH_PROMPTS]
    solo = [model.generate(p, BATCH_STEPS, stop_at_eos=False)[0] for p in prompts]
    batched = model.generate_batch(prompts, BATCH_STEPS)
    for p, s, b in zip(prompts, solo, batched):
        status = "same" if s == b else "DIFFERENT"
        print(f"batch row ({len(p)}-token prompt): {status}: {model.tokenizer.decode(b)!r}")
    if solo != batched:
        sys.exit("FAIL: batched decoding differs from solo decoding")
    print("OK", flush=True)


if __name__ == "__main__":
    main()
