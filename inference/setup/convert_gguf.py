#!/usr/bin/env python3
"""Convert a decoder GGUF (llama, qwen2, qwen3, gemma3) into the model directory Stead's inference engine loads.

    python convert_gguf.py --gguf PATH --out DIR [--precision int4|int8|fp32]

The decoder graph is written directly with the onnx helper API in the layout of the
onnxruntime-genai model builder (GroupQueryAttention with rotary inside the op, no
position_ids input), filled with the dequantized GGUF weights, and its MatMuls are then
quantized with onnxruntime's own MatMulNBitsQuantizer:

  int4  k-quant int4 (block 32) for every layer, int8 for the lm_head
  int8  k-quant int8 (block 32, asymmetric) everywhere
  fp32  no quantization

Besides model.onnx the directory gets tokenizer.json (Hugging Face `tokenizers` format,
built from the GGUF vocabulary), tokenizer_config.json, chat_template.jinja,
stead_model.json (read by the Rust engine) and genai_config.json (read by
onnxruntime-genai, the benchmark peer). Progress goes to stdout, one flushed line per step.
"""

import argparse
import hashlib
import json
import logging
import os
import sys
import time
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

import gguf
from gguf_graph import Graph, build_model
from gguf_vocab import (
    ConvertError,
    build_tokenizer,
    field,
    genai_config,
    special_tokens,
    tokenizer_config,
)

STEPS = 7
BLOCK_SIZE = 32
# MatMulNBits accuracy level 4 computes with int8 activations: the fastest CPU kernels,
# and what the onnxruntime-genai builder uses on CPU.
ACCURACY_LEVEL = 4
# A protobuf file cannot exceed 2 GiB; larger models keep their weights in one side file.
PROTOBUF_LIMIT = 1_800_000_000
EXTERNAL_DATA_NAME = "model.onnx.data"


def progress(step, message):
    print(f"[{step}/{STEPS}] {message}", flush=True)


# ---------------------------------------------------------------------------------------
# GGUF metadata and weights
# ---------------------------------------------------------------------------------------

# Decoder families the converter writes, by GGUF `general.architecture`. All are pre-norm
# RMSNorm decoders with SwiGLU feed-forward blocks and grouped-query attention; they differ in
# what the attention carries:
#   permuted_qk  llama.cpp reorders Q/K rows for its interleaved rope (llama); the rest use the
#                rotate-half (NEOX) layout already
#   qkv_bias     additive q/k/v projection biases (qwen2)
#   qk_norm      an RMSNorm over each head of Q and K before the rotary embedding (qwen3, gemma3)
# and Gemma 3 in more (llama.cpp's build_gemma3 is the reference, since agreement is checked
# against it):
#   gemma        embeddings scaled by sqrt(hidden); an RMSNorm after attention and after the
#                feed-forward block, before each joins the residual stream; GeGLU (tanh GELU)
#                instead of SwiGLU
#   swa_period   every period-th layer attends globally, the others within
#                `{arch}.attention.sliding_window` positions, with their own rope base
#                (`rope_theta_local`; llama.cpp hard-codes 10,000 for gemma3, as does the
#                Hugging Face config's rope_local_base_freq)
# The GGUF stores Gemma's RMSNorm weights with their +1 already added, so every norm is the
# same op.
PLAIN = {"permuted_qk": False, "qkv_bias": False, "qk_norm": False, "gemma": False, "swa_period": 0, "rope_theta_local": 0.0}
ARCHITECTURES = {
    "llama": {**PLAIN, "permuted_qk": True},
    "qwen2": {**PLAIN, "qkv_bias": True},
    "qwen3": {**PLAIN, "qk_norm": True},
    "gemma3": {**PLAIN, "qk_norm": True, "gemma": True, "swa_period": 6, "rope_theta_local": 10000.0},
}
# Families seen in GGUF files that need graph features this converter does not write, with the
# reason given to the user.
UNSUPPORTED = {
    "gemma2": "its logit soft-capping and sliding-window layers are not written by this converter",
    "gemma": "its GeGLU blocks are not written by this converter",
    "phi3": "its fused projections and su/longrope scaling are not written by this converter",
    "mistral3": "vision towers are not supported",
    "qwen2moe": "mixture-of-experts models are not supported",
    "qwen3moe": "mixture-of-experts models are not supported",
}


@dataclass
class DecoderConfig:
    arch: str
    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    context_length: int
    rope_theta: float
    rope_linear_factor: float
    rms_eps: float
    tied_embeddings: bool
    permuted_qk: bool
    qkv_bias: bool
    qk_norm: bool
    gemma: bool
    swa_period: int
    rope_theta_local: float
    sliding_window: int


def read_config(reader):
    arch = field(reader, "general.architecture")
    if arch not in ARCHITECTURES:
        why = UNSUPPORTED.get(arch, "the converter does not know its graph")
        raise ConvertError(
            f"unsupported architecture {arch!r}: {why} (supported: {', '.join(sorted(ARCHITECTURES))})"
        )
    traits = ARCHITECTURES[arch]

    def key(name, default=None):
        return field(reader, f"{arch}.{name}") if default is None else field(reader, f"{arch}.{name}", default)

    hidden = int(key("embedding_length"))
    heads = int(key("attention.head_count"))
    head_dim = int(key("attention.key_length", hidden // heads))
    if int(key("attention.value_length", head_dim)) != head_dim:
        raise ConvertError("different key and value head sizes are not supported")
    if int(key("rope.dimension_count", head_dim)) != head_dim:
        raise ConvertError("partial rotary embeddings are not supported")
    if f"{arch}.expert_count" in reader.fields:
        raise ConvertError(f"mixture-of-experts {arch} models are not supported")

    scaling = key("rope.scaling.type", "none")
    if scaling not in ("none", "linear"):
        raise ConvertError(f"unsupported rope scaling {scaling!r}")
    linear_factor = float(key("rope.scaling.factor", 1.0)) if scaling == "linear" else 1.0

    tensor_names = {t.name for t in reader.tensors}
    vocab = key("vocab_size", 0) or None
    if vocab is None:
        vocab = len(reader.fields["tokenizer.ggml.tokens"].data)

    return DecoderConfig(
        arch=arch,
        name=str(field(reader, "general.name", "model")),
        num_layers=int(key("block_count")),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=int(key("attention.head_count_kv", heads)),
        head_dim=head_dim,
        vocab_size=int(vocab),
        context_length=int(key("context_length")),
        rope_theta=float(key("rope.freq_base", 10000.0)),
        rope_linear_factor=linear_factor,
        rms_eps=float(key("attention.layer_norm_rms_epsilon")),
        tied_embeddings="output.weight" not in tensor_names,
        sliding_window=int(key("attention.sliding_window", 0)) if traits["swa_period"] else 0,
        **traits,
    )


def unpermute_rotary(weight, n_heads):
    """Undo llama.cpp's Q/K row permutation.

    llama.cpp's converter reorders each head's rows so that its rope (which rotates adjacent
    pairs) matches Hugging Face's rotate-half layout. GroupQueryAttention with
    rotary_interleaved=0 implements rotate-half, so the rows go back to Hugging Face order.
    """
    rows, cols = weight.shape
    return weight.reshape(n_heads, rows // n_heads // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def load_weights(reader, cfg, step):
    """Dequantize every tensor to float32, keyed by GGUF name, in [out, in] orientation."""
    expected = {"token_embd.weight", "output_norm.weight"}
    if not cfg.tied_embeddings:
        expected.add("output.weight")
    parts = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"]
    if cfg.qk_norm:
        parts += ["attn_q_norm", "attn_k_norm"]
    if cfg.gemma:
        parts += ["post_attention_norm", "post_ffw_norm"]
    for i in range(cfg.num_layers):
        expected.update(f"blk.{i}.{part}.weight" for part in parts)
        if cfg.qkv_bias:
            expected.update(f"blk.{i}.attn_{x}.bias" for x in "qkv")
    optional = {"rope_freqs.weight"}
    present = {t.name for t in reader.tensors}
    if missing := sorted(expected - present):
        raise ConvertError(f"GGUF lacks tensor {missing[0]} ({len(missing)} missing)")
    if unexpected := sorted(present - expected - optional):
        raise ConvertError(f"unsupported tensor {unexpected[0]} (not a plain {cfg.arch} model)")

    weights = {}
    total = len(reader.tensors)
    report_every = max(1, total // 10)
    for n, tensor in enumerate(reader.tensors, 1):
        try:
            data = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        except NotImplementedError as e:
            raise ConvertError(f"cannot dequantize {tensor.name} ({tensor.tensor_type.name}): {e}") from None
        data = np.ascontiguousarray(data, dtype=np.float32)
        if cfg.permuted_qk and tensor.name.endswith("attn_q.weight"):
            data = unpermute_rotary(data, cfg.num_heads)
        elif cfg.permuted_qk and tensor.name.endswith("attn_k.weight"):
            data = unpermute_rotary(data, cfg.num_kv_heads)
        weights[tensor.name] = data
        if n % report_every == 0 or n == total:
            progress(step, f"dequantizing tensors {n}/{total}")

    embed = weights["token_embd.weight"]
    if embed.shape != (cfg.vocab_size, cfg.hidden_size):
        raise ConvertError(f"token_embd.weight has shape {embed.shape}, expected {(cfg.vocab_size, cfg.hidden_size)}")
    return weights


# ---------------------------------------------------------------------------------------
# Quantization
# ---------------------------------------------------------------------------------------


def quantize(model, cfg, precision, step):
    # The quantizer module configures root logging at INFO and logs every node; keep stdout
    # to our progress lines and stderr quiet.
    from onnxruntime.quantization import matmul_nbits_quantizer as mnq
    from onnxruntime.quantization.neural_compressor import weight_only

    logging.getLogger().setLevel(logging.WARNING)

    matmuls = sum(1 for n in model.graph.node if n.op_type == "MatMul")
    report_every = max(1, matmuls // 10)

    def report(total, i):
        if i % report_every == 0 or i == total:
            progress(step, f"quantizing MatMuls {i}/{total}")

    # k-quant (llama.cpp's search for each block's scale and zero point) for both: plain int4
    # makes this small model ramble, and int8 from the default quantizer gives wrong text
    # with accuracy level 4 in onnxruntime 1.31.1 (right text only at level 0, ~20x slower).
    if precision == "int4":
        # The lm_head, which also serves as the tied embedding table, stays int8.
        bits = {"/lm_head/MatMul": 8}
    else:
        bits = {n.name: 8 for n in model.graph.node if n.op_type == "MatMul"}
    config = mnq.KQuantWeightOnlyQuantConfig(customized_weight_config={name: {"bits": b} for name, b in bits.items()})
    # rtn_quantize draws a carriage-return progress bar on stdout; turn it into lines.
    weight_only.simple_progress_bar = report
    quantizer = mnq.MatMulNBitsQuantizer(
        model, bits=4, block_size=BLOCK_SIZE, is_symmetric=False, accuracy_level=ACCURACY_LEVEL, algo_config=config
    )
    quantizer.process()
    model = quantizer.model.model

    if cfg.tied_embeddings:
        tie_embedding(model, cfg)
    else:
        model = quantize_embedding(model)
    return model


def tie_embedding(model, cfg):
    """Gather token embeddings straight from the quantized lm_head weight.

    The quantized lm_head holds one row per token, quantized in blocks along the hidden
    dimension, which is exactly GatherBlockQuantized's layout; sharing it keeps a single
    copy of the largest tensor.
    """
    graph = model.graph
    lm_head = next(n for n in graph.node if n.op_type == "MatMulNBits" and n.output[0] == "logits")
    attrs = {a.name: helper.get_attribute_value(a) for a in lm_head.attribute}
    bits, block = attrs["bits"], attrs["block_size"]
    padded = -(-cfg.hidden_size // block) * block

    g = Graph()
    table = g.node("Reshape", [lm_head.input[1], g.const_i64([cfg.vocab_size, padded * bits // 8])], "/embed_tokens/Reshape")
    embedded = g.node(
        "GatherBlockQuantized",
        [table, "input_ids", *lm_head.input[2:]],
        "/embed_tokens/GatherBlockQuantized",
        domain="com.microsoft", bits=bits, block_size=block, gather_axis=0, quantize_axis=1,
    )
    if padded != cfg.hidden_size:
        embedded = g.node(
            "Slice", [embedded, g.const_i64([0]), g.const_i64([cfg.hidden_size]), g.const_i64([-1])], "/embed_tokens/Slice"
        )

    gather = next(n for n in graph.node if n.name == "/embed_tokens/Gather")
    consumers = [n for n in graph.node if gather.output[0] in n.input]
    for n in consumers:
        n.input[:] = [embedded if x == gather.output[0] else x for x in n.input]
    kept = [n for n in graph.node if n.name not in ("/embed_tokens/Transpose", "/embed_tokens/Gather")]
    graph.ClearField("node")
    graph.node.extend(g.nodes + kept)
    graph.initializer.extend(g.initializers)
    # The float lm_head weight was only still referenced by the removed Transpose.
    kept_init = [t for t in graph.initializer if t.name != "lm_head.weight"]
    graph.ClearField("initializer")
    graph.initializer.extend(kept_init)


def quantize_embedding(model):
    """Quantize a separate (untied) embedding table to symmetric int4 GatherBlockQuantized."""
    from onnxruntime.quantization import matmul_nbits_quantizer as mnq

    config = mnq.DefaultWeightOnlyQuantConfig(
        block_size=BLOCK_SIZE, is_symmetric=True, bits=4, op_types_to_quantize=("Gather",), quant_axes=(("Gather", 1),)
    )
    quantizer = mnq.MatMulNBitsQuantizer(model, algo_config=config)
    quantizer.process()
    return quantizer.model.model


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, ensure_ascii=False)
        f.write("\n")


# ---------------------------------------------------------------------------------------


def convert(gguf_path, out_dir, precision):
    started = time.monotonic()
    progress(1, f"reading {os.path.basename(gguf_path)}")
    try:
        reader = gguf.GGUFReader(gguf_path)
    except Exception as e:
        raise ConvertError(f"cannot read {gguf_path} as GGUF: {e}") from None
    cfg = read_config(reader)
    progress(
        1,
        f"{cfg.arch}: {cfg.num_layers} layers, hidden {cfg.hidden_size}, heads {cfg.num_heads}/{cfg.num_kv_heads} (kv), "
        f"head dim {cfg.head_dim}, vocab {cfg.vocab_size}, context {cfg.context_length}, "
        f"{'tied' if cfg.tied_embeddings else 'separate'} output weights",
    )
    # The tokenizer is checked before the slow steps so an unsupported one fails fast.
    tokenizer = build_tokenizer(reader)

    weights = load_weights(reader, cfg, 2)

    progress(3, "building the decoder graph")
    model = build_model(cfg, weights)
    del weights

    if precision == "fp32":
        progress(4, "keeping float32 weights (no quantization)")
    else:
        progress(4, f"quantizing to {precision}")
        model = quantize(model, cfg, precision, 4)

    progress(5, "writing model.onnx")
    os.makedirs(out_dir, exist_ok=True)
    model_path = os.path.join(out_dir, "model.onnx")
    for stale in (model_path, os.path.join(out_dir, EXTERNAL_DATA_NAME)):
        if os.path.exists(stale):
            os.remove(stale)
    large = sum(len(t.raw_data) for t in model.graph.initializer) > PROTOBUF_LIMIT
    onnx.save_model(model, model_path, save_as_external_data=large, all_tensors_to_one_file=True, location=EXTERNAL_DATA_NAME)
    del model

    progress(6, "writing tokenizer.json, tokenizer_config.json, chat_template.jinja")
    tokens = field(reader, "tokenizer.ggml.tokens")
    types = field(reader, "tokenizer.ggml.token_type", [1] * len(tokens))
    special = special_tokens(reader, tokens, types)
    chat_template = field(reader, "tokenizer.chat_template", None)
    write_json(os.path.join(out_dir, "tokenizer.json"), tokenizer)
    write_json(os.path.join(out_dir, "tokenizer_config.json"), tokenizer_config(reader, tokens, special, cfg, chat_template))
    if chat_template is not None:
        with open(os.path.join(out_dir, "chat_template.jinja"), "w", encoding="utf-8") as f:
            f.write(chat_template)

    progress(7, "writing stead_model.json, genai_config.json")
    write_json(
        os.path.join(out_dir, "stead_model.json"),
        {
            "format": 1,
            "architecture": cfg.arch,
            "name": cfg.name,
            "precision": precision,
            "vocab_size": cfg.vocab_size,
            "context_length": cfg.context_length,
            "num_layers": cfg.num_layers,
            "num_heads": cfg.num_heads,
            "num_kv_heads": cfg.num_kv_heads,
            "head_dim": cfg.head_dim,
            "hidden_size": cfg.hidden_size,
            "bos_token_id": special.bos,
            "eos_token_ids": special.eos,
            "pad_token_id": special.pad,
            "source_gguf": os.path.basename(gguf_path),
            "source_sha256": sha256(gguf_path),
        },
    )
    write_json(os.path.join(out_dir, "genai_config.json"), genai_config(cfg, special))

    size = sum(os.path.getsize(os.path.join(out_dir, f)) for f in ("model.onnx", EXTERNAL_DATA_NAME) if os.path.exists(os.path.join(out_dir, f)))
    print(f"done: {out_dir} ({precision}, model {size / 1e6:.1f} MB) in {time.monotonic() - started:.1f} s", flush=True)


def main():
    parser = argparse.ArgumentParser(description="Convert a decoder GGUF (llama, qwen2, qwen3, gemma3) into an ONNX model directory.")
    parser.add_argument("--gguf", required=True, help="path of the .gguf file")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--precision", choices=("int4", "int8", "fp32"), default="int4")
    args = parser.parse_args()
    try:
        if not os.path.isfile(args.gguf):
            raise ConvertError(f"no such file: {args.gguf}")
        convert(args.gguf, args.out, args.precision)
    except ConvertError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
    except Exception as e:  # anything unforeseen still ends with one line for `stead setup`
        print(f"error: {e.__class__.__name__}: {e}", file=sys.stderr, flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
