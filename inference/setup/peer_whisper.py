"""The speech benchmark's peer: whisper.cpp (through the `pywhispercpp` wheel) on the same
Whisper tiny.en weights Stead converts, for `stead bench speech`.

    python peer_whisper.py --source CT2_DIR --ggml OUT.bin --audio a.f32 [b.f32 …] --threads N --runs R

The weights come from the same CTranslate2 export `stead setup` reads (no other download):
they are written once into whisper.cpp's own model format (`ggml`, float16 matrices, as
whisper.cpp's `convert-pt-to-ggml.py` writes them) with the mel filter bank and the byte-level
vocabulary. Each audio file is raw little-endian float32 samples at 16 kHz — the samples
Stead's decoder made, so both engines hear the same input. Greedy decoding without timestamps
on every core asked for. Prints one JSON line: each file's text and its best time.
"""

import argparse
import json
import os
import struct
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ct2_reader import read_ct2  # noqa: E402


def mel_filters(n_mels=80, sr=16000, n_fft=400):
    """librosa.filters.mel(sr, n_fft, n_mels) (Slaney): Whisper's filter bank."""

    def hz_to_mel(f):
        f = np.asarray(f, dtype=np.float64)
        step = np.log(6.4) / 27
        return np.where(f >= 1000, 15 + np.log(np.maximum(f, 1e-10) / 1000) / step, f / (200 / 3))

    def mel_to_hz(m):
        m = np.asarray(m, dtype=np.float64)
        step = np.log(6.4) / 27
        return np.where(m >= 15, 1000 * np.exp(step * (m - 15)), m * 200 / 3)

    freqs = np.linspace(0, sr / 2, 1 + n_fft // 2)
    mels = mel_to_hz(np.linspace(hz_to_mel(0), hz_to_mel(sr / 2), n_mels + 2))
    widths = np.diff(mels)
    ramps = mels[:, None] - freqs[None, :]
    weights = np.zeros((n_mels, len(freqs)))
    for i in range(n_mels):
        weights[i] = np.maximum(0, np.minimum(-ramps[i] / widths[i], ramps[i + 2] / widths[i + 1]))
    return (weights * (2 / (mels[2:] - mels[:n_mels]))[:, None]).astype(np.float32)


def token_bytes(token):
    """A GPT-2 byte-level vocabulary entry's bytes."""
    printable = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, shifted = {}, 256
    for b in range(256):
        if b in printable:
            table[chr(b)] = b
        else:
            table[chr(shifted)] = b
            shifted += 1
    return bytes(table[c] for c in token)


def write_ggml(source, out):
    w = read_ct2(os.path.join(source, "model.bin"))
    vocab = open(os.path.join(source, "vocabulary.txt"), encoding="utf-8").read().splitlines()
    d = w["decoder/embeddings/weight"].shape[1]
    enc_layers = sum(1 for k in w if k.startswith("encoder/layer_") and k.endswith("/ffn/linear_0/weight"))
    dec_layers = sum(1 for k in w if k.startswith("decoder/layer_") and k.endswith("/ffn/linear_0/weight"))
    heads = int(w["decoder/num_heads"])
    f = lambda name: np.asarray(w[name], dtype=np.float32)
    tensors = {
        "encoder.conv1.weight": f("encoder/conv1/weight"),
        "encoder.conv1.bias": f("encoder/conv1/bias").reshape(-1, 1),
        "encoder.conv2.weight": f("encoder/conv2/weight"),
        "encoder.conv2.bias": f("encoder/conv2/bias").reshape(-1, 1),
        "encoder.positional_embedding": f("encoder/position_encodings/encodings"),
        "encoder.ln_post.weight": f("encoder/layer_norm/gamma"),
        "encoder.ln_post.bias": f("encoder/layer_norm/beta"),
        "decoder.token_embedding.weight": f("decoder/embeddings/weight"),
        "decoder.positional_embedding": f("decoder/position_encodings/encodings"),
        "decoder.ln.weight": f("decoder/layer_norm/gamma"),
        "decoder.ln.bias": f("decoder/layer_norm/beta"),
    }

    def block(out_prefix, ct2_prefix, cross):
        def attn(name, fused, proj, qkv_from_one):
            weight, bias = f(fused + "/weight"), f(fused + "/bias")
            if qkv_from_one:
                parts = {"query": slice(0, d), "key": slice(d, 2 * d), "value": slice(2 * d, 3 * d)}
                for part, rows in parts.items():
                    tensors[f"{out_prefix}.{name}.{part}.weight"] = weight[rows]
                    if part != "key":
                        tensors[f"{out_prefix}.{name}.{part}.bias"] = bias[rows]
            tensors[f"{out_prefix}.{name}.out.weight"] = f(proj + "/weight")
            tensors[f"{out_prefix}.{name}.out.bias"] = f(proj + "/bias")

        attn("attn", ct2_prefix + "/self_attention/linear_0", ct2_prefix + "/self_attention/linear_1", True)
        tensors[f"{out_prefix}.attn_ln.weight"] = f(ct2_prefix + "/self_attention/layer_norm/gamma")
        tensors[f"{out_prefix}.attn_ln.bias"] = f(ct2_prefix + "/self_attention/layer_norm/beta")
        if cross:
            p = ct2_prefix + "/attention"
            tensors[f"{out_prefix}.cross_attn.query.weight"] = f(p + "/linear_0/weight")
            tensors[f"{out_prefix}.cross_attn.query.bias"] = f(p + "/linear_0/bias")
            kv_w, kv_b = f(p + "/linear_1/weight"), f(p + "/linear_1/bias")
            tensors[f"{out_prefix}.cross_attn.key.weight"] = kv_w[:d]
            tensors[f"{out_prefix}.cross_attn.value.weight"] = kv_w[d:]
            tensors[f"{out_prefix}.cross_attn.value.bias"] = kv_b[d:]
            tensors[f"{out_prefix}.cross_attn.out.weight"] = f(p + "/linear_2/weight")
            tensors[f"{out_prefix}.cross_attn.out.bias"] = f(p + "/linear_2/bias")
            tensors[f"{out_prefix}.cross_attn_ln.weight"] = f(p + "/layer_norm/gamma")
            tensors[f"{out_prefix}.cross_attn_ln.bias"] = f(p + "/layer_norm/beta")
        tensors[f"{out_prefix}.mlp_ln.weight"] = f(ct2_prefix + "/ffn/layer_norm/gamma")
        tensors[f"{out_prefix}.mlp_ln.bias"] = f(ct2_prefix + "/ffn/layer_norm/beta")
        for i, j in ((0, 0), (2, 1)):
            tensors[f"{out_prefix}.mlp.{i}.weight"] = f(f"{ct2_prefix}/ffn/linear_{j}/weight")
            tensors[f"{out_prefix}.mlp.{i}.bias"] = f(f"{ct2_prefix}/ffn/linear_{j}/bias")

    for i in range(enc_layers):
        block(f"encoder.blocks.{i}", f"encoder/layer_{i}", False)
    for i in range(dec_layers):
        block(f"decoder.blocks.{i}", f"decoder/layer_{i}", True)
    eot = vocab.index("<|endoftext|>")
    filters = mel_filters(w["encoder/conv1/weight"].shape[1])
    partial = out + ".partial"
    with open(partial, "wb") as fout:
        fout.write(struct.pack("i", 0x67676D6C))
        hparams = [len(vocab), 1500, d, heads, enc_layers, 448, d, heads, dec_layers, filters.shape[0], 1]
        fout.write(struct.pack("11i", *hparams))
        fout.write(struct.pack("ii", *filters.shape))
        fout.write(filters.tobytes())
        fout.write(struct.pack("i", eot))
        for token in vocab[:eot]:
            data = token_bytes(token)
            fout.write(struct.pack("i", len(data)))
            fout.write(data)
        for name, data in tensors.items():
            keep_f32 = data.ndim < 2 or name in (
                "encoder.conv1.bias", "encoder.conv2.bias",
                "encoder.positional_embedding", "decoder.positional_embedding",
            )
            data = data.astype(np.float32 if keep_f32 else np.float16)
            encoded = name.encode()
            fout.write(struct.pack("iii", data.ndim, len(encoded), 0 if keep_f32 else 1))
            fout.write(struct.pack(f"{data.ndim}i", *reversed(data.shape)))
            fout.write(encoded)
            fout.write(np.ascontiguousarray(data).tobytes())
    os.replace(partial, out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--ggml", required=True)
    ap.add_argument("--audio", nargs="+", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    if not os.path.isfile(args.ggml):
        print("writing the ggml model", file=sys.stderr, flush=True)
        write_ggml(args.source, args.ggml)
    from pywhispercpp.model import Model

    model = Model(args.ggml, n_threads=args.threads, print_realtime=False, print_progress=False,
                  print_timestamps=False, redirect_whispercpp_logs_to=None)
    results = []
    for path in args.audio:
        audio = np.fromfile(path, dtype="<f4")
        best, text = None, ""
        for _ in range(args.runs):
            started = time.perf_counter()
            segments = model.transcribe(audio, language="en", no_timestamps=True, temperature_inc=0.0)
            elapsed = time.perf_counter() - started
            best = elapsed if best is None else min(best, elapsed)
            text = " ".join(s.text.strip() for s in segments).strip()
        results.append({"file": os.path.basename(path), "seconds": best, "text": text})
        print(f"  whisper.cpp {os.path.basename(path)}: {best:.3f} s", file=sys.stderr, flush=True)
    print(json.dumps({"peer": "pywhispercpp 1.5.1 (whisper.cpp 1.8.5)", "threads": args.threads, "results": results}))


if __name__ == "__main__":
    main()
