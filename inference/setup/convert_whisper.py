"""Whisper (CTranslate2 weights) to two ONNX graphs the Rust engine runs with ONNX Runtime.

  encoder.onnx  mel [1, 80, 3000] float32 -> cross_kv [2*L, 1, 1500, d] (each decoder layer's
                cross-attention keys and values, computed once per 30-second window)
  decoder.onnx  tokens [1, n] int64, past_kv [2*L, 1, past, d], cross_kv
                -> logits [1, vocab] (the last position's), present_kv [2*L, 1, past+n, d]

The weights come from a CTranslate2 `model.bin` (read here without CTranslate2: the file is a
list of named tensors). Every MatMul is then quantized to int8 with onnxruntime's own
MatMulNBitsQuantizer (block 32, as the text models), unless --precision fp32.
"""

import argparse
import json
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper
import onnx

from ct2_reader import read_ct2

OPSET = 21
IR_VERSION = 10
class Graph:
    def __init__(self, weights):
        self.weights = weights
        self.nodes = []
        self.initializers = {}
        self.count = 0

    def op(self, op, *inputs, **attrs):
        self.count += 1
        out = f"{op.lower()}_{self.count}"
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=out, **attrs))
        return out

    def const(self, name, array):
        if name not in self.initializers:
            self.initializers[name] = numpy_helper.from_array(np.ascontiguousarray(array), name)
        return name

    def i64(self, *values):
        return self.const("i64_" + "_".join(map(str, values)), np.array(values, dtype=np.int64))

    def w(self, name):
        return self.const(name, self.weights[name].astype(np.float32))

    def linear(self, x, prefix, rows=None):
        """x @ W^T + b for a CTranslate2 `[out, in]` weight (rows: a slice of the outputs)."""
        weight = self.weights[prefix + "/weight"].astype(np.float32)
        bias = self.weights[prefix + "/bias"].astype(np.float32)
        suffix = ""
        if rows is not None:
            weight, bias, suffix = weight[rows], bias[rows], f"_{rows.start}_{rows.stop}"
        w = self.const(prefix + "/weight_t" + suffix, weight.T)
        b = self.const(prefix + "/bias" + suffix, bias)
        return self.op("Add", self.op("MatMul", x, w), b)

    def norm(self, x, prefix):
        return self.op("LayerNormalization", x, self.w(prefix + "/gamma"), self.w(prefix + "/beta"), axis=-1, epsilon=1e-5)

    def heads(self, x, cfg, keys=False):
        """[1, T, d] -> [1, H, T, dh] (keys: [1, H, dh, T])."""
        x = self.op("Reshape", x, self.i64(0, -1, cfg["heads"], cfg["dim"] // cfg["heads"]))
        return self.op("Transpose", x, perm=[0, 2, 3, 1] if keys else [0, 2, 1, 3])

    def attention(self, q, k, v, cfg, mask=None):
        scale = self.const("attention_scale", np.array((cfg["dim"] // cfg["heads"]) ** -0.5, dtype=np.float32))
        scores = self.op("Mul", self.op("MatMul", self.heads(q, cfg), self.heads(k, cfg, keys=True)), scale)
        if mask is not None:
            scores = self.op("Add", scores, mask)
        out = self.op("MatMul", self.op("Softmax", scores, axis=-1), self.heads(v, cfg))
        out = self.op("Transpose", out, perm=[0, 2, 1, 3])
        return self.op("Reshape", out, self.i64(0, -1, cfg["dim"]))

    def ffn(self, x, prefix):
        h = self.norm(x, prefix + "/layer_norm")
        h = self.op("Gelu", self.linear(h, prefix + "/linear_0"))
        return self.op("Add", x, self.linear(h, prefix + "/linear_1"))

    def model(self, inputs, outputs, name):
        graph = helper.make_graph(self.nodes, name, inputs, outputs, list(self.initializers.values()))
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = IR_VERSION
        return model


def encoder(weights, cfg):
    g = Graph(weights)
    d, layers = cfg["dim"], cfg["layers"]
    x = g.op("Gelu", g.op("Conv", "mel", g.w("encoder/conv1/weight"), g.w("encoder/conv1/bias"), pads=[1, 1]))
    x = g.op("Gelu", g.op("Conv", x, g.w("encoder/conv2/weight"), g.w("encoder/conv2/bias"), pads=[1, 1], strides=[2]))
    x = g.op("Add", g.op("Transpose", x, perm=[0, 2, 1]), g.w("encoder/position_encodings/encodings"))
    for i in range(cfg["encoder_layers"]):
        p = f"encoder/layer_{i}"
        h = g.norm(x, p + "/self_attention/layer_norm")
        q, k, v = (g.linear(h, p + "/self_attention/linear_0", slice(j * d, (j + 1) * d)) for j in range(3))
        x = g.op("Add", x, g.linear(g.attention(q, k, v, cfg), p + "/self_attention/linear_1"))
        x = g.ffn(x, p + "/ffn")
    x = g.norm(x, "encoder/layer_norm")
    kv = []
    for i in range(layers):
        p = f"decoder/layer_{i}/attention/linear_1"
        for j in range(2):
            kv.append(g.op("Unsqueeze", g.linear(x, p, slice(j * d, (j + 1) * d)), g.i64(0)))
    g.nodes.append(helper.make_node("Concat", kv, ["cross_kv"], name="cross_kv", axis=0))
    return g.model(
        [helper.make_tensor_value_info("mel", TensorProto.FLOAT, [1, cfg["mels"], 3000])],
        [helper.make_tensor_value_info("cross_kv", TensorProto.FLOAT, [2 * layers, 1, 1500, d])],
        "whisper_encoder",
    )


def decoder(weights, cfg):
    g = Graph(weights)
    d, layers = cfg["dim"], cfg["layers"]
    past = g.op("Gather", g.op("Shape", "past_kv"), g.i64(2), axis=0)  # [1]
    n = g.op("Gather", g.op("Shape", "tokens"), g.i64(1), axis=0)
    total = g.op("Add", past, n)
    scalar = lambda t: g.op("Squeeze", t, g.i64(0))
    positions = g.op("Range", scalar(past), scalar(total), g.const("one", np.array(1, dtype=np.int64)))
    # The embedding table is kept in float16 (it is also the output projection, quantized
    # there): a lookup reads one row, so its precision costs nothing measurable.
    embed = g.const("decoder/embeddings/weight_f16", weights["decoder/embeddings/weight"].astype(np.float16))
    rows = g.op("Cast", g.op("Gather", embed, "tokens", axis=0), to=TensorProto.FLOAT)
    x = g.op("Add", rows,
             g.op("Gather", g.w("decoder/position_encodings/encodings"), positions, axis=0))
    # Causal mask [n, past+n]: key j is hidden from query past+i when j > past+i.
    keys = g.op("Range", g.const("zero", np.array(0, dtype=np.int64)), scalar(total), "one")
    hidden = g.op("Greater", g.op("Unsqueeze", keys, g.i64(0)), g.op("Unsqueeze", positions, g.i64(1)))
    mask = g.op("Where", hidden, g.const("masked", np.array(-1e9, dtype=np.float32)),
                g.const("zero_f", np.array(0.0, dtype=np.float32)))
    present = []
    for i in range(layers):
        p = f"decoder/layer_{i}"
        h = g.norm(x, p + "/self_attention/layer_norm")
        q, k, v = (g.linear(h, p + "/self_attention/linear_0", slice(j * d, (j + 1) * d)) for j in range(3))
        cache = []
        for j, new in ((0, k), (1, v)):
            old = g.op("Squeeze", g.op("Gather", "past_kv", g.i64(2 * i + j), axis=0), g.i64(0))
            cache.append(g.op("Concat", old, new, axis=1))
            present.append(g.op("Unsqueeze", cache[-1], g.i64(0)))
        x = g.op("Add", x, g.linear(g.attention(q, cache[0], cache[1], cfg, mask), p + "/self_attention/linear_1"))
        h = g.norm(x, p + "/attention/layer_norm")
        q = g.linear(h, p + "/attention/linear_0")
        ck, cv = (g.op("Squeeze", g.op("Gather", "cross_kv", g.i64(2 * i + j), axis=0), g.i64(0)) for j in range(2))
        x = g.op("Add", x, g.linear(g.attention(q, ck, cv, cfg), p + "/attention/linear_2"))
        x = g.ffn(x, p + "/ffn")
    last = g.op("Slice", x, g.i64(-1), g.i64(2**62), g.i64(1))
    last = g.op("Reshape", g.norm(last, "decoder/layer_norm"), g.i64(1, d))
    logits_w = g.const("decoder/embeddings/weight_t", weights["decoder/embeddings/weight"].astype(np.float32).T)
    g.nodes.append(helper.make_node("MatMul", [last, logits_w], ["logits"], name="logits"))
    g.nodes.append(helper.make_node("Concat", present, ["present_kv"], name="present_kv", axis=0))
    f = TensorProto.FLOAT
    return g.model(
        [
            helper.make_tensor_value_info("tokens", TensorProto.INT64, [1, "n"]),
            helper.make_tensor_value_info("past_kv", f, [2 * layers, 1, "past", d]),
            helper.make_tensor_value_info("cross_kv", f, [2 * layers, 1, 1500, d]),
        ],
        [
            helper.make_tensor_value_info("logits", f, [1, cfg["vocab"]]),
            helper.make_tensor_value_info("present_kv", f, [2 * layers, 1, "total", d]),
        ],
        "whisper_decoder",
    )


def quantize(model, bits):
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer, DefaultWeightOnlyQuantConfig

    config = DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=False, accuracy_level=4, bits=bits)
    q = MatMulNBitsQuantizer(model, algo_config=config)
    q.process()
    return q.model.model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("source", help="the CTranslate2 model directory (model.bin, config.json, vocabulary.txt)")
    ap.add_argument("out_dir")
    ap.add_argument("--name", default="whisper-tiny.en")
    ap.add_argument("--precision", choices=["int8", "fp32"], default="int8")
    args = ap.parse_args()
    weights = read_ct2(os.path.join(args.source, "model.bin"))
    source_config = json.load(open(os.path.join(args.source, "config.json")))
    vocabulary = open(os.path.join(args.source, "vocabulary.txt"), encoding="utf-8").read().splitlines()
    special = {token: i for i, token in enumerate(vocabulary) if token.startswith("<|") and token.endswith("|>")}
    heads = int(weights["decoder/num_heads"])
    layers = sum(1 for k in weights if k.startswith("decoder/layer_") and k.endswith("/ffn/linear_0/weight"))
    cfg = {
        "dim": weights["decoder/embeddings/weight"].shape[1],
        "vocab": weights["decoder/embeddings/weight"].shape[0],
        "heads": heads,
        "layers": layers,
        "encoder_layers": sum(1 for k in weights if k.startswith("encoder/layer_") and k.endswith("/ffn/linear_0/weight")),
        "mels": weights["encoder/conv1/weight"].shape[1],
    }
    if len(vocabulary) != cfg["vocab"]:
        sys.exit(f"vocabulary.txt has {len(vocabulary)} tokens, the model {cfg['vocab']}")
    os.makedirs(args.out_dir, exist_ok=True)
    for step, (name, build) in enumerate((("encoder", encoder), ("decoder", decoder)), 1):
        print(f"[{step}/2] {name}.onnx: building the graph", flush=True)
        model = build(weights, cfg)
        if args.precision == "int8":
            print(f"[{step}/2] {name}.onnx: quantizing MatMul weights to int8", flush=True)
            model = quantize(model, 8)
        onnx.save(model, os.path.join(args.out_dir, f"{name}.onnx"))
    open(os.path.join(args.out_dir, "vocabulary.txt"), "w", encoding="utf-8").write("\n".join(vocabulary) + "\n")
    english_only = "<|en|>" not in special or cfg["vocab"] < 51865
    config = {
        "name": args.name,
        "dim": cfg["dim"],
        "layers": cfg["layers"],
        "heads": cfg["heads"],
        "mels": cfg["mels"],
        "vocab": cfg["vocab"],
        "english_only": english_only,
        "eot": special["<|endoftext|>"],
        "sot": special["<|startoftranscript|>"],
        "no_timestamps": special["<|notimestamps|>"],
        "no_speech": special.get("<|nospeech|>", special.get("<|nocaptions|>")),
        "timestamp_begin": special["<|notimestamps|>"] + 1,
        "suppress": source_config["suppress_ids"],
        "suppress_begin": source_config["suppress_ids_begin"],
        "precision": args.precision,
    }
    json.dump(config, open(os.path.join(args.out_dir, "stead_whisper.json"), "w"), indent=1)
    print(f"wrote {args.out_dir}", flush=True)


if __name__ == "__main__":
    main()
