"""The decoder graph convert_gguf.py writes: GroupQueryAttention decoder layers in the layout of
the onnxruntime-genai model builder, with float32 MatMul weights that convert_gguf.py then
quantizes. Architecture differences (biases, QK-norm) are flags of the DecoderConfig.
"""

import math

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from gguf_vocab import ConvertError

OPSET = 21  # first opset with int4 tensor types, which the quantizer may emit
IR_VERSION = 10
# Graph input (int64 scalar, default 0): 1 = logits of each row's last new position only.
LAST_LOGITS_ONLY = "last_logits_only"


# ---------------------------------------------------------------------------------------
# ONNX graph
# ---------------------------------------------------------------------------------------


class Graph:
    """Collects nodes, initializers and constants for the decoder graph."""

    def __init__(self):
        self.nodes = []
        self.initializers = []
        self._constants = {}

    def node(self, op, inputs, name, outputs=1, domain="", **attrs):
        names = [f"{name}/output_{i}" for i in range(outputs)] if isinstance(outputs, int) else outputs
        self.nodes.append(helper.make_node(op, inputs, names, name=name, domain=domain, **attrs))
        return names[0] if len(names) == 1 else names

    def initializer(self, name, array):
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def const_i64(self, values, scalar=False):
        """An int64 constant shared by every node that needs the same value."""
        key = (tuple(values), scalar)
        if key not in self._constants:
            name = f"/constants/int64/{'scalar' if scalar else 'vector'}/{'_'.join(map(str, values))}"
            array = np.array(values[0] if scalar else values, dtype=np.int64)
            self._constants[key] = self.initializer(name, array)
        return self._constants[key]


def rotary_caches(cfg, rope_freqs, theta=None):
    """cos/sin tables [context_length, head_dim/2] for GroupQueryAttention."""
    theta = cfg.rope_theta if theta is None else theta
    inv_freq = 1.0 / (theta ** (np.arange(0, cfg.head_dim, 2, dtype=np.float64) / cfg.head_dim))
    if rope_freqs is not None:
        # llama 3.x stores its long-context frequency factors as a tensor; llama.cpp divides by them.
        inv_freq = inv_freq / rope_freqs.astype(np.float64)
    positions = np.arange(cfg.context_length, dtype=np.float64) / cfg.rope_linear_factor
    freqs = np.outer(positions, inv_freq)
    return np.cos(freqs).astype(np.float32), np.sin(freqs).astype(np.float32)


def head_norms(g, cfg, b, qkv, q_norm, k_norm):
    """Splits packed Q|K|V and RMS-normalizes each head of Q and K (qwen3's QK-norm).

    Returns the three inputs GroupQueryAttention takes when key and value come separately;
    the rotary embedding is still applied inside the op, after the norm, as in the model.
    """
    q_dim, kv_dim = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    q, k, v = g.node("Split", [qkv, g.const_i64([q_dim, kv_dim, kv_dim])], f"/{b}/attn/Split", outputs=3, axis=-1)

    def per_head(x, heads, weight, what):
        # [batch, seq, heads * D] -> [batch, seq, heads, D], normalized over D, and back.
        split = g.node("Reshape", [x, g.const_i64([0, 0, heads, cfg.head_dim])], f"/{b}/attn/{what}_norm/Reshape")
        normed = g.node(
            "SimplifiedLayerNormalization",
            [split, g.initializer(f"{b}.attn_{what}_norm.weight", weight)],
            f"/{b}/attn/{what}_norm/SimplifiedLayerNorm", axis=-1, epsilon=cfg.rms_eps, stash_type=1,
        )
        return g.node("Reshape", [normed, g.const_i64([0, 0, heads * cfg.head_dim])], f"/{b}/attn/{what}_norm/Reshape_1")

    return [per_head(q, cfg.num_heads, q_norm, "q"), per_head(k, cfg.num_kv_heads, k_norm, "k"), v]


def last_positions(g, cfg, final, mask_sum):
    """The hidden states the lm_head turns into logits: every position's, or with
    `last_logits_only` = 1 only each row's last new one ([batch, 1, hidden]).

    A prompt pass needs the logits of one position per row, and the lm_head is the widest
    MatMul of a small model (a fifth to a quarter of a prefill's work here) with a
    vocabulary-wide output row per position. A row's last new position is its mask's sum
    minus the past length, minus one (rows are right-padded), clamped into the pass.
    """
    flag = g.initializer(LAST_LOGITS_ONLY, np.array(0, dtype=np.int64))
    past = g.node("Shape", ["past_key_values.0.key"], "/last_positions/PastShape", start=2, end=3)
    seq = g.node("Shape", ["input_ids"], "/last_positions/InputShape", start=1, end=2)
    last = g.node("Sub", [g.node("Sub", [mask_sum, past], "/last_positions/Sub"), g.const_i64([1])], "/last_positions/Sub_1")
    upper = g.node("Sub", [seq, g.const_i64([1])], "/last_positions/Sub_2")
    last = g.node("Min", [g.node("Max", [last, g.const_i64([0])], "/last_positions/Max"), upper], "/last_positions/Min")
    # K = seq - flag * (seq - 1) positions per row: index k + flag * last[row].
    count = g.node("Sub", [seq, g.node("Mul", [upper, flag], "/last_positions/Mul")], "/last_positions/Count")
    count = g.node("Squeeze", [count, g.const_i64([0])], "/last_positions/Squeeze")
    ks = g.node("Range", [g.const_i64([0], scalar=True), count, g.const_i64([1], scalar=True)], "/last_positions/Range")
    offset = g.node("Mul", [last, flag], "/last_positions/Mul_1")
    index = g.node(
        "Add",
        [g.node("Unsqueeze", [ks, g.const_i64([0])], "/last_positions/Unsqueeze"), g.node("Unsqueeze", [offset, g.const_i64([1])], "/last_positions/Unsqueeze_1")],
        "/last_positions/Add",
    )
    index = g.node("Unsqueeze", [index, g.const_i64([2])], "/last_positions/Unsqueeze_2")
    index = g.node("Expand", [index, g.const_i64([1, 1, cfg.hidden_size])], "/last_positions/Expand")
    return g.node("GatherElements", [final, index], "/last_positions/GatherElements", axis=1)


def build_model(cfg, weights):
    """The float32 decoder graph. MatMul weights are [in, out] initializers, quantized later."""
    g = Graph()
    H, V = cfg.hidden_size, cfg.vocab_size
    kv_dim = cfg.num_kv_heads * cfg.head_dim

    def linear(name, x, weight):
        return g.node("MatMul", [x, g.initializer(f"{name}.weight", np.ascontiguousarray(weight.T))], f"/{name}/MatMul")

    # A tied model has one table for both ends: the lm_head weight, which tie_embedding later
    # shares with the quantized embedding lookup.
    lm_head_source = weights["token_embd.weight" if cfg.tied_embeddings else "output.weight"]
    lm_head_weight = g.initializer("lm_head.weight", np.ascontiguousarray(lm_head_source.T))
    if cfg.tied_embeddings:
        # Float graphs gather from the transposed lm_head weight (onnxruntime folds the
        # Transpose at load); quantized graphs replace this pair with GatherBlockQuantized.
        table = g.node("Transpose", [lm_head_weight], "/embed_tokens/Transpose", perm=[1, 0])
    else:
        table = g.initializer("embed_tokens.weight", weights["token_embd.weight"])
    hidden = g.node("Gather", [table, "input_ids"], "/embed_tokens/Gather")
    if cfg.gemma:
        # llama.cpp scales by sqrtf(n_embd) in float32 (Hugging Face rounds it to bfloat16 first).
        scale = g.initializer("/embed_tokens/scale", np.array(math.sqrt(H), dtype=np.float32))
        hidden = g.node("Mul", [hidden, scale], "/embed_tokens/Mul")

    def rms(x, name, weight):
        return g.node(
            "SimplifiedLayerNormalization", [x, g.initializer(f"{name}.weight", weight)],
            f"/{name}/SimplifiedLayerNorm", axis=-1, epsilon=cfg.rms_eps, stash_type=1,
        )

    # GroupQueryAttention takes each row's length from the attention mask: seqlens_k is the
    # row's total length minus one, total_sequence_length the mask width. This is what lets
    # right-padded rows of different lengths decode in one batch.
    mask_sum = g.node("ReduceSum", ["attention_mask", g.const_i64([1])], "/attn_mask/ReduceSum", keepdims=0)
    seqlens = g.node("Sub", [mask_sum, g.const_i64([1], scalar=True)], "/attn_mask/Sub")
    seqlens_k = g.node("Cast", [seqlens], "/attn_mask/Sub/Cast", to=TensorProto.INT32)
    mask_shape = g.node("Shape", ["attention_mask"], "/attn_mask/Shape")
    total_len = g.node("Gather", [mask_shape, g.const_i64([1], scalar=True)], "/attn_mask/Gather", axis=0)
    total_seq_len = g.node("Cast", [total_len], "/attn_mask/Gather/Cast", to=TensorProto.INT32)

    cos, sin = rotary_caches(cfg, weights.get("rope_freqs.weight"))
    g.initializer("cos_cache", cos)
    g.initializer("sin_cache", sin)
    if cfg.swa_period:
        cos, sin = rotary_caches(cfg, None, cfg.rope_theta_local)
        g.initializer("cos_cache_local", cos)
        g.initializer("sin_cache_local", sin)

    residual = None
    for i in range(cfg.num_layers):
        p, b = f"blk.{i}.", f"layers.{i}"
        if residual is None:
            normed = rms(hidden, f"{b}.attn_norm", weights[p + "attn_norm.weight"])
            residual = hidden
        else:
            # Adds the previous block's output to the residual stream and normalizes, in one op.
            normed, _, _, residual = g.node(
                "SkipSimplifiedLayerNormalization",
                [hidden, residual, g.initializer(f"{b}.attn_norm.weight", weights[p + "attn_norm.weight"])],
                f"/{b}/attn_norm/SkipLayerNorm", outputs=4, domain="com.microsoft", epsilon=cfg.rms_eps,
            )

        # One packed Q|K|V MatMul; GroupQueryAttention splits it when key and value are empty.
        qkv_weight = np.concatenate([weights[p + "attn_q.weight"], weights[p + "attn_k.weight"], weights[p + "attn_v.weight"]])
        if qkv_weight.shape != (cfg.num_heads * cfg.head_dim + 2 * kv_dim, H):
            raise ConvertError(f"unexpected attention weight shapes in layer {i}")
        qkv = linear(f"{b}.attn_qkv", normed, qkv_weight)
        if cfg.qkv_bias:
            bias = np.concatenate([weights[p + f"attn_{x}.bias"] for x in "qkv"])
            qkv = g.node("Add", [qkv, g.initializer(f"{b}.attn_qkv.bias", bias)], f"/{b}/attn_qkv/Add")
        q_k_v = [qkv, "", ""]
        if cfg.qk_norm:
            q_k_v = head_norms(g, cfg, b, qkv, weights[p + "attn_q_norm.weight"], weights[p + "attn_k_norm.weight"])
        # Sliding-window layers: every layer but each swa_period-th. GroupQueryAttention keeps
        # local_window_size + 1 positions (the current one and the window before it), llama.cpp
        # masks keys sliding_window or more positions back: a window of sliding_window - 1.
        local = cfg.swa_period and (i + 1) % cfg.swa_period != 0
        rope = ("cos_cache_local", "sin_cache_local") if local else ("cos_cache", "sin_cache")
        attn = g.node(
            "GroupQueryAttention",
            [*q_k_v, f"past_key_values.{i}.key", f"past_key_values.{i}.value", seqlens_k, total_seq_len, *rope],
            f"/{b}/attn/GroupQueryAttention",
            outputs=[f"/{b}/attn/GroupQueryAttention/output_0", f"present.{i}.key", f"present.{i}.value"],
            domain="com.microsoft",
            num_heads=cfg.num_heads, kv_num_heads=cfg.num_kv_heads,
            scale=1.0 / math.sqrt(cfg.head_dim), do_rotary=1, rotary_interleaved=0,
            local_window_size=cfg.sliding_window - 1 if local else -1, softcap=0.0,
        )[0]
        attn_out = linear(f"{b}.attn_output", attn, weights[p + "attn_output.weight"])
        if cfg.gemma:
            attn_out = rms(attn_out, f"{b}.post_attention_norm", weights[p + "post_attention_norm.weight"])

        normed, _, _, residual = g.node(
            "SkipSimplifiedLayerNormalization",
            [attn_out, residual, g.initializer(f"{b}.ffn_norm.weight", weights[p + "ffn_norm.weight"])],
            f"/{b}/ffn_norm/SkipLayerNorm", outputs=4, domain="com.microsoft", epsilon=cfg.rms_eps,
        )
        gate = linear(f"{b}.ffn_gate", normed, weights[p + "ffn_gate.weight"])
        up = linear(f"{b}.ffn_up", normed, weights[p + "ffn_up.weight"])
        if cfg.gemma:
            act = g.node("Gelu", [gate], f"/{b}/ffn/Gelu", approximate="tanh")
        else:
            act = g.node("Mul", [gate, g.node("Sigmoid", [gate], f"/{b}/ffn/Sigmoid")], f"/{b}/ffn/SiLU")
        hidden = linear(f"{b}.ffn_down", g.node("Mul", [act, up], f"/{b}/ffn/Mul"), weights[p + "ffn_down.weight"])
        if cfg.gemma:
            hidden = rms(hidden, f"{b}.post_ffw_norm", weights[p + "post_ffw_norm.weight"])

    final, _, _, _ = g.node(
        "SkipSimplifiedLayerNormalization",
        [hidden, residual, g.initializer("output_norm.weight", weights["output_norm.weight"])],
        "/output_norm/SkipLayerNorm", outputs=4, domain="com.microsoft", epsilon=cfg.rms_eps,
    )
    g.node("MatMul", [last_positions(g, cfg, final, mask_sum), lm_head_weight], "/lm_head/MatMul", outputs=["logits"])

    kv_shape = ["batch_size", cfg.num_kv_heads, "past_sequence_length", cfg.head_dim]
    present_shape = ["batch_size", cfg.num_kv_heads, "total_sequence_length", cfg.head_dim]
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch_size", "total_sequence_length"]),
        # An input with a default (it is also an initializer): callers that do not know it,
        # onnxruntime-genai among them, get every position's logits.
        helper.make_tensor_value_info(LAST_LOGITS_ONLY, TensorProto.INT64, []),
    ]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch_size", "logits_length", V])]
    for i in range(cfg.num_layers):
        for kind in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(f"past_key_values.{i}.{kind}", TensorProto.FLOAT, kv_shape))
            outputs.append(helper.make_tensor_value_info(f"present.{i}.{kind}", TensorProto.FLOAT, present_shape))

    graph = helper.make_graph(g.nodes, "decoder", inputs, outputs, g.initializers)
    opsets = [helper.make_opsetid("", OPSET), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION, producer_name="stead-convert-gguf")
