"""The GGUF vocabulary as Hugging Face `tokenizers` files, and the configuration files that
describe the converted model (tokenizer_config.json, genai_config.json): the tokenizer half of
convert_gguf.py, which imports it. Also the metadata reader both halves share (`field`) and
the error that ends a conversion with a one-line message (`ConvertError`).
"""

from dataclasses import dataclass

# llama.cpp token types (tokenizer.ggml.token_type)
TOKEN_CONTROL = 3
TOKEN_USER_DEFINED = 4

# Tokens that end a turn or a document in common chat models; those present in the
# vocabulary as control tokens join the GGUF's own eos id as stop tokens.
STOP_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<|eom_id|>", "</s>", "<end_of_turn>")

# Pre-tokenizers of llama.cpp's gpt2-style vocabularies (tokenizer.ggml.pre) as Hugging Face
# `tokenizers` pre_tokenizer components.
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Qwen2's split (also Qwen3's): llama 3's, with single digits.
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def byte_level(use_regex):
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": use_regex}


PRE_TOKENIZERS = {
    "default": [byte_level(True)],
    "gpt2": [byte_level(True)],
    # llama.cpp splits every digit for these, then applies the gpt2 regex.
    **{
        name: [{"type": "Digits", "individual_digits": True}, byte_level(True)]
        for name in ("smollm", "starcoder", "refact", "codeshell")
    },
    **{
        name: [
            {"type": "Split", "pattern": {"Regex": LLAMA3_SPLIT}, "behavior": "Isolated", "invert": False},
            byte_level(False),
        ]
        for name in ("llama-bpe", "llama3", "llama-v3")
    },
    "qwen2": [
        {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT}, "behavior": "Isolated", "invert": False},
        byte_level(False),
    ],
}
# Vocabularies whose Hugging Face tokenizer normalizes its input first.
NORMALIZERS = {"qwen2": {"type": "NFC"}}


class ConvertError(Exception):
    """A problem with the input that ends the conversion with a one-line message."""


_MISSING = object()


def field(reader, key, default=_MISSING):
    f = reader.fields.get(key)
    if f is None:
        if default is _MISSING:
            raise ConvertError(f"GGUF metadata lacks {key}")
        return default
    return f.contents()


# ---------------------------------------------------------------------------------------
# Tokenizer and configuration files
# ---------------------------------------------------------------------------------------


def build_tokenizer(reader):
    """A Hugging Face tokenizer.json for the GGUF's byte-level BPE vocabulary."""
    kind = field(reader, "tokenizer.ggml.model")
    if kind != "gpt2":
        raise ConvertError(f"unsupported tokenizer model {kind!r} (only byte-level BPE 'gpt2' is supported)")
    pre = field(reader, "tokenizer.ggml.pre", "default")
    if pre not in PRE_TOKENIZERS:
        raise ConvertError(f"unsupported pre-tokenizer {pre!r} (supported: {', '.join(sorted(PRE_TOKENIZERS))})")

    tokens = field(reader, "tokenizer.ggml.tokens")
    types = field(reader, "tokenizer.ggml.token_type", [1] * len(tokens))
    merges = field(reader, "tokenizer.ggml.merges")

    added = [
        {
            "id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": ty == TOKEN_CONTROL,
        }
        for i, (tok, ty) in enumerate(zip(tokens, types))
        if ty in (TOKEN_CONTROL, TOKEN_USER_DEFINED)
    ]

    post_processor = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}
    if field(reader, "tokenizer.ggml.add_bos_token", False):
        bos_id = int(field(reader, "tokenizer.ggml.bos_token_id"))
        bos = {"SpecialToken": {"id": tokens[bos_id], "type_id": 0}}
        seq = {"Sequence": {"id": "A", "type_id": 0}}
        seq_b = {"Sequence": {"id": "B", "type_id": 1}}
        post_processor = {
            "type": "TemplateProcessing",
            "single": [bos, seq],
            "pair": [bos, seq, {"SpecialToken": {"id": tokens[bos_id], "type_id": 1}}, seq_b],
            "special_tokens": {tokens[bos_id]: {"id": tokens[bos_id], "ids": [bos_id], "tokens": [tokens[bos_id]]}},
        }

    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": NORMALIZERS.get(pre),
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": PRE_TOKENIZERS[pre]},
        "post_processor": post_processor,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": {tok: i for i, tok in enumerate(tokens)},
            "merges": list(merges),
        },
    }


@dataclass
class SpecialTokens:
    bos: int
    eos: list
    pad: int
    unk: int | None


def special_tokens(reader, tokens, types):
    eos = int(field(reader, "tokenizer.ggml.eos_token_id"))
    eos_ids = [eos]
    for key in ("tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"):
        if (extra := field(reader, key, None)) is not None and int(extra) not in eos_ids:
            eos_ids.append(int(extra))
    for i, (tok, ty) in enumerate(zip(tokens, types)):
        if tok in STOP_TOKENS and ty == TOKEN_CONTROL and i not in eos_ids:
            eos_ids.append(i)
    unk = field(reader, "tokenizer.ggml.unknown_token_id", None)
    return SpecialTokens(
        bos=int(field(reader, "tokenizer.ggml.bos_token_id", eos)),
        eos=eos_ids,
        pad=int(field(reader, "tokenizer.ggml.padding_token_id", eos)),
        unk=None if unk is None else int(unk),
    )


def tokenizer_config(reader, tokens, special, cfg, chat_template):
    """tokenizer_config.json: lets Hugging Face and onnxruntime-genai load tokenizer.json."""
    config = {
        "add_bos_token": bool(field(reader, "tokenizer.ggml.add_bos_token", False)),
        "add_eos_token": bool(field(reader, "tokenizer.ggml.add_eos_token", False)),
        "add_prefix_space": False,
        "bos_token": tokens[special.bos],
        "eos_token": tokens[special.eos[0]],
        "pad_token": tokens[special.pad],
        "clean_up_tokenization_spaces": False,
        "model_max_length": cfg.context_length,
        # `tokenizers` class: transformers then uses tokenizer.json as written (with
        # "GPT2Tokenizer" transformers 5 rebuilds the pre-tokenizer and drops Digits).
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    if special.unk is not None:
        config["unk_token"] = tokens[special.unk]
    if chat_template is not None:
        config["chat_template"] = chat_template
    return config


def genai_config(cfg, special):
    """genai_config.json for onnxruntime-genai, describing the very same model.onnx."""
    return {
        "model": {
            "bos_token_id": special.bos,
            "context_length": cfg.context_length,
            "decoder": {
                "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
                "filename": "model.onnx",
                "head_size": cfg.head_dim,
                "hidden_size": cfg.hidden_size,
                "inputs": {
                    "input_ids": "input_ids",
                    "attention_mask": "attention_mask",
                    "past_key_names": "past_key_values.%d.key",
                    "past_value_names": "past_key_values.%d.value",
                },
                "outputs": {
                    "logits": "logits",
                    "present_key_names": "present.%d.key",
                    "present_value_names": "present.%d.value",
                },
                "num_attention_heads": cfg.num_heads,
                "num_hidden_layers": cfg.num_layers,
                "num_key_value_heads": cfg.num_kv_heads,
            },
            "eos_token_id": special.eos,
            "pad_token_id": special.pad,
            "type": cfg.arch,
            "vocab_size": cfg.vocab_size,
        },
        "search": {
            "diversity_penalty": 0.0,
            "do_sample": False,
            "early_stopping": True,
            "length_penalty": 1.0,
            "max_length": cfg.context_length,
            "min_length": 0,
            "no_repeat_ngram_size": 0,
            "num_beams": 1,
            "num_return_sequences": 1,
            # GroupQueryAttention updates a max_length-sized cache in place.
            "past_present_share_buffer": True,
            "repetition_penalty": 1.0,
            "temperature": 1.0,
            "top_k": 1,
            "top_p": 1.0,
        },
    }
