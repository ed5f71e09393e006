"""The official MCP Python client (`mcp` on PyPI) against Stead's own `/mcp` endpoint: create a
session, send a message that parks on an approval, list the pending approval, approve it, and
read the reply. Run by tests/e2e/mcp.rs as `python mcp_client.py BASE_URL AGENT`; prints one
JSON line per step and exits non-zero on the first failure.
"""

import json
import sys

import anyio
from mcp import Client

base, agent = sys.argv[1], sys.argv[2]


def structured(result):
    assert not result.is_error, result
    return result.structured_content


async def main():
    async with Client(f"{base}/mcp") as client:
        names = sorted(tool.name for tool in (await client.list_tools()).tools)
        assert names == ["create_session", "decide_approval", "list_approvals", "send_message"], names
        print(json.dumps({"tools": names}), flush=True)

        session = structured(await client.call_tool("create_session", {"agent": agent}))
        print(json.dumps({"created": session["id"]}), flush=True)

        bad = await client.call_tool("create_session", {"agent": "no-such-agent"})
        assert bad.is_error and bad.structured_content["error"]["code"] == "unknown_agent", bad
        print(json.dumps({"refused": bad.structured_content["error"]["code"]}), flush=True)

        sent = structured(
            await client.call_tool("send_message", {"session_id": session["id"], "text": "delete the users table"})
        )
        assert sent["status"] == "awaiting_approval", sent
        print(json.dumps({"parked": sent["pending_approvals"][0]["call_id"]}), flush=True)

        inbox = structured(await client.call_tool("list_approvals", {}))
        mine = [a for a in inbox["approvals"] if a["session_id"] == session["id"]]
        assert len(mine) == 1, inbox
        scoped = structured(await client.call_tool("list_approvals", {"session_id": session["id"]}))
        assert [a["call_id"] for a in scoped["approvals"]] == [mine[0]["call_id"]], scoped

        decided = structured(
            await client.call_tool(
                "decide_approval",
                {"session_id": session["id"], "call_id": mine[0]["call_id"], "approved": True, "reason": "via MCP"},
            )
        )
        print(json.dumps({"decided": decided}), flush=True)

        again = await client.call_tool(
            "decide_approval", {"session_id": session["id"], "call_id": mine[0]["call_id"], "approved": True}
        )
        assert again.is_error, again
        print(json.dumps({"second_decision": again.structured_content["error"]["code"]}), flush=True)
        print(json.dumps({"session": session["id"]}), flush=True)


anyio.run(main)
