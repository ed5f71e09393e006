"""A small client for Stead's REST API (docs/api.md): sessions, messages, events, approvals.

Standard library only. `Stead` holds the server's address and an operator key (or none, on an
open loopback server); `Session` holds one session's id and token.
"""

from __future__ import annotations

import json
import time
import uuid
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Dict, Iterator, List, Optional

__all__ = ["Stead", "Session", "SteadError"]
__version__ = "0.1.0"


class SteadError(Exception):
    """An error answer: HTTP `status`, the API's `code` and `message`."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


def _call(base: str, credential: Optional[str], method: str, path: str, body: Any = None, timeout: float = 330) -> Any:
    headers = {"accept": "application/json"}
    if credential:
        headers["authorization"] = f"Bearer {credential}"
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["content-type"] = "application/json"
    request = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read().decode()
            return json.loads(text) if text else None
    except urllib.error.HTTPError as error:
        text = error.read().decode(errors="replace")
        try:
            payload = json.loads(text)["error"]
            raise SteadError(error.code, payload.get("code", "http_error"), payload.get("message", "")) from None
        except (ValueError, KeyError, TypeError):
            raise SteadError(error.code, "http_error", text[:200] or error.reason) from None


def _query(**params: Any) -> str:
    kept = {k: str(v) for k, v in params.items() if v is not None and v != ""}
    return ("?" + urllib.parse.urlencode(kept)) if kept else ""


class Session:
    """One session, driven with its own token (or the operator's key)."""

    def __init__(self, stead: "Stead", id: str, token: Optional[str] = None, row: Optional[dict] = None):
        self.stead = stead
        self.id = id
        self.token = token
        self.row = row or {}

    def _call(self, method: str, path: str, body: Any = None, timeout: float = 330) -> Any:
        return _call(self.stead.base_url, self.token or self.stead.api_key, method, f"/v1/sessions/{self.id}{path}", body, timeout)

    def get(self) -> dict:
        """The session's row and what its fold says now (status, pending approvals, usage)."""
        return self._call("GET", "")

    def send(self, text: str, wait: bool = False, mode: Optional[str] = None, client_id: Optional[str] = None) -> dict:
        """Sends a user message. `wait=True` waits until the turn ends or parks on an approval
        (at most 300 s) and answers `{status, reply, pending_approvals, last_seq}`; otherwise
        `{session_id, seq}` once it is journaled. `client_id` (a fresh one by default) makes a
        retry apply once."""
        body = {"text": text, "client_id": client_id or str(uuid.uuid4())}
        if mode:
            body["mode"] = mode
        return self._call("POST", "/messages" + ("?wait=true" if wait else ""), body)

    def events(self, after: int = 0, limit: int = 1000) -> List[dict]:
        """Journal events after `after` (one page)."""
        return self._call("GET", f"/events{_query(after=after, limit=limit)}")["events"]

    def follow(self, after: int = 0, until: Optional[Callable[[dict], bool]] = None, poll: float = 0.25, timeout: float = 300) -> Iterator[dict]:
        """Every event after `after`, in order and once each, as they are journaled; stops after
        the first event for which `until` is true, or at `timeout` seconds (TimeoutError)."""
        deadline = time.monotonic() + timeout
        while True:
            page = self.events(after)
            for event in page:
                after = event["seq"]
                yield event
                if until and until(event):
                    return
            if not page:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no matching event in {timeout} s")
                time.sleep(poll)

    def approvals(self) -> List[dict]:
        """What this session (and its child sessions) waits for."""
        return self._call("GET", "/approvals")["approvals"]

    def decide(self, approval: dict, approved: bool, reason: str = "", scope: str = "once") -> dict:
        """Decides a pending approval, bound to the arguments it was asked for (`args_hash`)."""
        body = {"approved": approved, "scope": scope, "args_hash": approval.get("args_hash")}
        if reason:
            body["reason"] = reason
        path = f"/v1/sessions/{approval['session_id']}/approvals/{approval['call_id']}"
        return _call(self.stead.base_url, self.token or self.stead.api_key, "POST", path, body)

    def cancel(self) -> dict:
        """Cancels the running turn."""
        return self._call("POST", "/cancel")

    def close(self) -> dict:
        """Closes the session (its journal is kept)."""
        return self._call("DELETE", "")


class Stead:
    """A Stead server: its base URL and an operator API key (None on an open loopback server)."""

    def __init__(self, base_url: str, api_key: Optional[str] = None, timeout: float = 330):
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        return _call(self.base_url, self.api_key, method, path, body, self.timeout)

    def create_session(self, agent: str, metadata: Optional[Dict[str, Any]] = None) -> Session:
        body: Dict[str, Any] = {"agent": agent}
        if metadata is not None:
            body["metadata"] = metadata
        row = self._call("POST", "/v1/sessions", body)
        return Session(self, row["id"], row.get("token"), row)

    def session(self, id: str, token: Optional[str] = None) -> Session:
        """A session by id, driven with `token` (else the operator key)."""
        return Session(self, id, token)

    def sessions(self, agent: Optional[str] = None, status: Optional[str] = None, limit: Optional[int] = None) -> List[dict]:
        return self._call("GET", f"/v1/sessions{_query(agent=agent, status=status, limit=limit)}")["sessions"]

    def approvals(self) -> List[dict]:
        """Every pending approval across sessions (operators)."""
        return self._call("GET", "/v1/approvals?status=pending")["approvals"]

    def decide(self, approval: dict, approved: bool, reason: str = "", scope: str = "once") -> dict:
        return Session(self, approval["session_id"]).decide(approval, approved, reason, scope)

    def agents(self) -> List[dict]:
        return self._call("GET", "/v1/agents")["agents"]
