#!/usr/bin/env python3
"""Generate a labelled PII benchmark set, fully offline.

Uses presidio-evaluator's PresidioSentenceFaker (PyPI: presidio-evaluator, MIT;
its bundled raw_data/*.csv come from FakeNameGenerator.com, CC BY-SA 3.0 US)
with:
  * the package's bundled templates that contain at least one in-scope entity,
  * a small set of extra templates below (NINO, secrets, more SSN/IP/IBAN,
    and PII-free hard negatives),
  * custom Faker providers for UK NINO and API keys / secrets,
  * the package's default providers minus HospitalProvider (it queries
    WikiData over the network at construction time).

Output: one JSON object per line:
  {"id": n, "text": str,
   "spans":     [{"start", "end", "entity"}]   # in scope: EMAIL PHONE CARD IBAN SSN NINO IP SECRET
   "oos_spans": [{"start", "end", "entity"}]   # out of scope (PERSON, GPE, ...), not scored
   "template_id": int, "source": "bundled"|"extra"}

usage: pii_gen.py [-n 300] [-o pii.jsonl] [--seed 42]
"""
import argparse
import json
import random
import re
import string
import sys
import warnings

warnings.filterwarnings("ignore")

from faker.providers import BaseProvider  # noqa: E402
from presidio_evaluator.data_generator import (  # noqa: E402
    PresidioSentenceFaker,
    presidio_templates_file_path,
)
from presidio_evaluator.data_generator.faker_extensions import (  # noqa: E402
    AddressProviderNew,
    AgeProvider,
    IpAddressProvider,
    NationalityProvider,
    OrganizationProvider,
    PhoneNumberProviderNew,
    ReligionProvider,
    UsDriverLicenseProvider,
)

# presidio-evaluator / custom entity types -> benchmark entity names
ENTITY_MAP = {
    "EMAIL_ADDRESS": "EMAIL",
    "PHONE_NUMBER": "PHONE",
    "CREDIT_CARD": "CARD",
    "IBAN_CODE": "IBAN",
    "US_SSN": "SSN",
    "UK_NINO": "NINO",
    "IP_ADDRESS": "IP",
    "SECRET": "SECRET",
}
IN_SCOPE_PLACEHOLDERS = ("email", "phone_number", "credit_card_number", "iban",
                         "ssn", "ip_address", "uk_nino", "secret")

EXTRA_TEMPLATES = [
    # UK NINO
    "My National Insurance number is {{uk_nino}}.",
    "NI number: {{uk_nino}}",
    "Please update the payroll record for {{name}}, NINO {{uk_nino}}, effective next month.",
    "HMRC letter ref for {{first_name}}: national insurance {{uk_nino}}",
    "{{name}} ({{uk_nino}}) has started at the {{city}} office.",
    "Employee {{first_name}} {{last_name}}, NI {{uk_nino}}, phone {{phone_number}}",
    # secrets / API keys
    "export AWS_ACCESS_KEY_ID={{secret}}",
    "Here is the token for the CI job: {{secret}} - please rotate it after use",
    "Authorization: Bearer {{secret}}",
    "OPENAI_API_KEY={{secret}}",
    "I accidentally committed {{secret}} to the repo, how do I purge it?",
    "config = {'api_key': '{{secret}}', 'region': 'eu-west-1'}",
    "curl -H 'X-Api-Key: {{secret}}' https://api.example.com/v1/items",
    "The slack bot uses {{secret}} to post into #alerts.",
    # SSN / IP / IBAN / card / phone / email, more context variety
    "SSN {{ssn}} belongs to {{name}}, DOB {{date_of_birth}}.",
    "Applicant: {{name}}; Social Security No.: {{ssn}}; Tel: {{phone_number}}",
    "Failed login for {{email}} from {{ip_address}} at 03:12 UTC",
    "sshd[2231]: Accepted publickey for deploy from {{ip_address}} port 52144",
    "Firewall rule added: allow tcp from {{ip_address}} to port 443",
    "Refund to card ending {{credit_card_number}} was processed; confirmation sent to {{email}}.",
    "Wire EUR 1,250.00 to {{iban}} (beneficiary {{name}}) by Friday.",
    "Call me back on {{phone_number}} or drop a line to {{email}}.",
    "Billing contact {{email}} / {{phone_number}}; card on file {{credit_card_number}}",
    "payload={\"user\": \"{{email}}\", \"ip\": \"{{ip_address}}\", \"ssn\": \"{{ssn}}\"}",
    # PII-free hard negatives (numbers that look like identifiers but are not)
    "Order #{{order_no}} shipped on {{date_time}}; tracking will follow.",
    "Build 4.12.{{small_no}} fixed the crash in the parser (see ticket PRJ-{{small_no}}).",
    "The meeting moved to room {{small_no}}, floor 3, at 14:30.",
    "Version 10.2.0.{{small_no}} of the driver is required.",
    "Invoice total: $1,{{small_no}}.00 due in 30 days.",
    "Run `git checkout {{commit_sha}}` to reproduce.",
]


class BenchProvider(BaseProvider):
    """Extra entity providers: UK NINO, API keys/secrets, negative fillers."""

    # HMRC: first letter not D F I Q U V; second not D F I O Q U V;
    # prefixes BG GB KN NK NT TN ZZ never allocated.
    _NINO_FIRST = "ABCEGHJKLMNOPRSTWXYZ"
    _NINO_SECOND = "ABCEGHJKLMNPRSTWXYZ"
    _NINO_BAD = {"BG", "GB", "KN", "NK", "NT", "TN", "ZZ"}

    def uk_nino(self):
        while True:
            p = self.random_element(self._NINO_FIRST) + self.random_element(self._NINO_SECOND)
            if p not in self._NINO_BAD:
                break
        d = "".join(self.random_element(string.digits) for _ in range(6))
        s = self.random_element("ABCD")
        if self.generator.random.random() < 0.4:
            return f"{p} {d[:2]} {d[2:4]} {d[4:]} {s}"
        return f"{p}{d}{s}"

    def _rs(self, alphabet, n):
        return "".join(self.generator.random.choice(alphabet) for _ in range(n))

    def secret(self):
        up, al = string.ascii_uppercase + string.digits, string.ascii_letters + string.digits
        kind = self.generator.random.randrange(7)
        if kind == 0:
            return "AKIA" + self._rs(up, 16)                      # AWS access key id
        if kind == 1:
            return "ghp_" + self._rs(al, 36)                      # GitHub PAT
        if kind == 2:
            return "xoxb-" + self._rs(string.digits, 12) + "-" + self._rs(string.digits, 13) + "-" + self._rs(al, 24)  # Slack
        if kind == 3:
            return "sk-proj-" + self._rs(al + "_-", 48)           # OpenAI
        if kind == 4:
            return "sk_live_" + self._rs(al, 24)                  # Stripe
        if kind == 5:
            return "AIza" + self._rs(al + "_-", 35)               # Google API key
        return "glpat-" + self._rs(al + "_-", 20)                 # GitLab PAT

    def order_no(self):
        return self.numerify("########")

    def small_no(self):
        return str(self.generator.random.randint(100, 999))

    def commit_sha(self):
        return self._rs("0123456789abcdef", 40)


def load_templates(neg_ratio_keep=0.15, rng=None):
    # bundled templates encode line breaks as a literal backslash-n; make them real newlines
    bundled = [t.strip().replace("\\n", "\n") for t in presidio_templates_file_path.read_text().splitlines() if t.strip()]
    ph = re.compile(r"{{\s*([A-Za-z_]+)\s*}}")
    in_scope, out_scope = [], []
    for t in bundled:
        names = {n.lower() for n in ph.findall(t)}
        (in_scope if names & set(IN_SCOPE_PLACEHOLDERS) else out_scope).append(t)
    # keep some bundled templates with only out-of-scope PII (names, addresses)
    # as precision probes for the in-scope detectors
    rng = rng or random.Random(0)
    k = max(1, int(len(out_scope) * neg_ratio_keep))
    out_keep = rng.sample(out_scope, k)
    templates = [(t, "bundled") for t in in_scope + out_keep] + [(t, "extra") for t in EXTRA_TEMPLATES]
    return templates


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=300)
    ap.add_argument("-o", default="pii.jsonl")
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()

    templates = load_templates(rng=random.Random(args.seed))
    texts = [t for t, _ in templates]
    origin = {i: s for i, (_, s) in enumerate(templates)}

    providers = [IpAddressProvider, NationalityProvider, OrganizationProvider,
                 UsDriverLicenseProvider, AgeProvider, AddressProviderNew,
                 PhoneNumberProviderNew, ReligionProvider]  # no HospitalProvider (network)
    faker = PresidioSentenceFaker(locale="en_US", lower_case_ratio=0.0,
                                  sentence_templates=texts, entity_providers=providers,
                                  random_seed=args.seed)
    faker.add_provider(BenchProvider)
    for k in ("uk_nino", "secret"):
        faker.add_entity_type_mapping(k, {"uk_nino": "UK_NINO", "secret": "SECRET"}[k])
    for k in ("order_no", "small_no", "commit_sha"):
        faker.add_entity_type_mapping(k, "FILLER")

    samples = faker.generate_new_fake_sentences(args.n)
    counts = {}
    with open(args.o, "w") as fh:
        for i, s in enumerate(samples):
            spans, oos = [], []
            for sp in sorted(s.spans, key=lambda x: x.start_position):
                ent = ENTITY_MAP.get(sp.entity_type)
                d = {"start": sp.start_position, "end": sp.end_position,
                     "entity": ent or sp.entity_type}
                assert s.full_text[d["start"]:d["end"]] == sp.entity_value, (s.full_text, sp)
                if ent:
                    spans.append(d)
                    counts[ent] = counts.get(ent, 0) + 1
                elif sp.entity_type != "FILLER":
                    oos.append(d)
            fh.write(json.dumps({"id": i, "text": s.full_text, "spans": spans, "oos_spans": oos,
                                 "template_id": s.template_id,
                                 "source": origin.get(s.template_id, "?")}) + "\n")
    print(f"wrote {len(samples)} samples to {args.o}; templates={len(texts)}; "
          f"in-scope span counts={dict(sorted(counts.items()))}", file=sys.stderr)


if __name__ == "__main__":
    main()
