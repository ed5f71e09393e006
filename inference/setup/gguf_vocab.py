"""The GGUF vocabulary as Hugging Face `tokenizers` files, and the configuration files that
describe the converted model (tokenizer_config.json, genai_config.json): the tokenizer half of
convert_gguf.py, which imports it. Also the metadata reader both halves share (`field`) and
the error that ends a conversion with a one-line message (`ConvertError`).
"""

from dataclasses import dataclass

# llama.cpp token types (tokenizer.ggml.token_type)
TOKEN_NORMAL = 1
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
    """A Hugging Face tokenizer.json for the GGUF's vocabulary: byte-level BPE ('gpt2') or
    SentencePiece BPE ('llama', with byte fallback)."""
    kind = field(reader, "tokenizer.ggml.model")
    if kind == "llama":
        return sentencepiece_tokenizer(reader)
    if kind != "gpt2":
        raise ConvertError(f"unsupported tokenizer model {kind!r} (supported: byte-level BPE 'gpt2', SentencePiece 'llama')")
    pre = field(reader, "tokenizer.ggml.pre", "default")
    if pre not in PRE_TOKENIZERS:
        raise ConvertError(f"unsupported pre-tokenizer {pre!r} (supported: {', '.join(sorted(PRE_TOKENIZERS))})")

    tokens = field(reader, "tokenizer.ggml.tokens")
    types = field(reader, "tokenizer.ggml.token_type", [1] * len(tokens))
    merges = field(reader, "tokenizer.ggml.merges")

    added = added_tokens(tokens, types)
    byte_level_post = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}
    post_processor = bos_post_processor(reader, tokens) or byte_level_post

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


def added_tokens(tokens, types):
    """Control and user-defined tokens, matched whole before the model runs (as llama.cpp does)."""
    return [
        {
            "id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": ty == TOKEN_CONTROL,
        }
        for i, (tok, ty) in enumerate(zip(tokens, types))
        if ty in (TOKEN_CONTROL, TOKEN_USER_DEFINED)
    ]


def bos_post_processor(reader, tokens):
    """Prepends the BOS token when the GGUF says to; None otherwise."""
    if not field(reader, "tokenizer.ggml.add_bos_token", False):
        return None
    bos_id = int(field(reader, "tokenizer.ggml.bos_token_id"))
    bos = {"SpecialToken": {"id": tokens[bos_id], "type_id": 0}}
    seq = {"Sequence": {"id": "A", "type_id": 0}}
    seq_b = {"Sequence": {"id": "B", "type_id": 1}}
    return {
        "type": "TemplateProcessing",
        "single": [bos, seq],
        "pair": [bos, seq, {"SpecialToken": {"id": tokens[bos_id], "type_id": 1}}, seq_b],
        "special_tokens": {tokens[bos_id]: {"id": tokens[bos_id], "ids": [bos_id], "tokens": [tokens[bos_id]]}},
    }


def sentencepiece_tokenizer(reader):
    """SentencePiece BPE (llama.cpp's 'llama' vocabularies: Gemma, Llama 2) as Hugging Face BPE.

    llama.cpp's SPM tokenizer starts from characters and repeatedly merges the adjacent pair
    whose merged piece scores highest. The same as BPE merges: every way of writing a normal
    token as two normal tokens, ranked by the merged token's score (ties by the pieces' ids),
    which is how Hugging Face's own SentencePiece converter derives them. Spaces become '▁'
    (no '▁' is prepended unless the GGUF asks for it); characters outside the vocabulary fall
    back to their UTF-8 bytes (<0xNN> tokens).
    """
    tokens = field(reader, "tokenizer.ggml.tokens")
    types = field(reader, "tokenizer.ggml.token_type", [TOKEN_NORMAL] * len(tokens))
    scores = field(reader, "tokenizer.ggml.scores")
    ids = {tok: i for i, tok in enumerate(tokens)}
    normal = [ty == TOKEN_NORMAL for ty in types]
    merges = []
    for i, tok in enumerate(tokens):
        if not normal[i] or len(tok) < 2:
            continue
        for cut in range(1, len(tok)):
            left, right = ids.get(tok[:cut]), ids.get(tok[cut:])
            if left is not None and right is not None and normal[left] and normal[right]:
                merges.append((-scores[i], left, right))
    merges.sort()
    normalizers = [{"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]
    if field(reader, "tokenizer.ggml.add_space_prefix", True):
        normalizers.insert(0, {"type": "Prepend", "prepend": "\u2581"})
    unk = field(reader, "tokenizer.ggml.unknown_token_id", None)
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added_tokens(tokens, types),
        "normalizer": {"type": "Sequence", "normalizers": normalizers},
        "pre_tokenizer": None,
        "post_processor": bos_post_processor(reader, tokens),
        "decoder": {
            "type": "Sequence",
            "decoders": [
                {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
                {"type": "ByteFallback"},
                {"type": "Fuse"},
            ],
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None if unk is None else tokens[int(unk)],
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": True,
            "byte_fallback": True,
            "ignore_merges": False,
            "vocab": ids,
            "merges": [[tokens[left], tokens[right]] for _, left, right in merges],
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
