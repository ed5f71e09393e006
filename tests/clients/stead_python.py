"""The `stead` Python client (clients/python, installed into a venv by scripts/test.sh) against a
running `stead serve` whose model is a scripted upstream double (tests/e2e/clients.rs): a `clock`
call that needs approval, then "It is noon.", then "Nothing new.".

Run as `python stead_python.py BASE_URL OPERATOR_KEY`; prints one JSON line per check and exits
non-zero on the first failure.
"""

import json
import sys

import stead
from stead import Stead, SteadError

base, key = sys.argv[1], sys.argv[2]


def check(name, condition, detail=None):
    print(json.dumps({"check": name, "ok": bool(condition), "detail": detail}, default=str), flush=True)
    if not condition:
        sys.exit(1)


check("installed from clients/python", stead.__file__ and "site-packages" in stead.__file__, stead.__file__)
operator = Stead(base, api_key=key)
created = operator.create_session("ops", metadata={"from": "python"})
check("create", created.token and created.row["status"] == "idle", created.row)

# From here on, the session's own token only.
mine = Stead(base).session(created.id, created.token)
try:
    Stead(base, api_key=created.token).sessions()
    check("a session token lists nothing", False)
except SteadError as error:
    check("a session token lists nothing", error.status in (401, 403), error.code)

outcome = mine.send("What time is it?", wait=True)
check("the turn parks on the approval", outcome["status"] == "awaiting_approval", outcome)
pending = mine.approvals()
check("one approval, with the arguments' hash", len(pending) == 1 and pending[0]["args_hash"], pending)
check("the operator's inbox has it", any(a["call_id"] == pending[0]["call_id"] for a in operator.approvals()))

mine.decide(pending[0], approved=True, reason="fine by me")
events = list(mine.follow(until=lambda e: e["kind"] == "turn_finished", timeout=60))
kinds = [e["kind"] for e in events]
check("the tool ran and the turn finished", "tool_call_finished" in kinds and kinds[-1] == "turn_finished", kinds)
seqs = [e["seq"] for e in events]
check("events once each, in order", seqs == list(range(1, len(seqs) + 1)), seqs)
reply = [e for e in events if e["kind"] == "assistant_message"][-1]["payload"]["text"]
check("the answer", reply == "It is noon.", reply)

try:
    mine.decide({"session_id": created.id, "call_id": "nope", "args_hash": "x"}, approved=True)
    check("a bad decision is refused", False)
except SteadError as error:
    check("a bad decision is refused", 400 <= error.status < 500 and error.code, {"status": error.status, "code": error.code})
after = mine.get()["last_seq"]
check("and changes nothing", after == seqs[-1], after)

second = mine.send("Anything else?", wait=True)
check("a second turn", second["status"] == "idle" and second["reply"] == "Nothing new.", second)
mine.close()
check("closed", mine.get()["status"] == "closed")
