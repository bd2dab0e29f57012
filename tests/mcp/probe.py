#!/usr/bin/env python3
"""Another user's agent probing someone else's chain over `supervisorctl mcp`.

Used by tests/system_mode.rs. Usage:

    probe.py SUPERVISORCTL CONFIG ID [ID...]

Run as the prober (e.g. bob), it lists what the daemon shows this user and, for each ID
(chain or job ids of another user's work), calls every tool that takes an id: reading
it, resolving it and recovering it, for real (not dry runs). It prints one JSON object
with every answer; the Rust test asserts that nothing of the other user's work came back
and nothing was changed.
"""

import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters, stdio_client


def result(r):
    d = r.model_dump(mode="json", by_alias=True)
    texts = [c.get("text") for c in d.get("content", []) if c.get("type") == "text"]
    return {
        "is_error": bool(d.get("isError")),
        "structured": d.get("structuredContent"),
        "text": texts[0] if texts else None,
    }


async def main(ctl, config, ids):
    server = StdioServerParameters(command=ctl, args=["--config", config, "mcp"])
    out = {"ids": {}}
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()

            async def call(name, args):
                return result(await session.call_tool(name, args))

            out["pending"] = await call("list_pending_failed", {})
            out["status"] = await call("status", {})
            for i in ids:
                fail = {"id": i, "action": "fail", "reason": "probe", "confidence": 1.0}
                out["ids"][i] = {
                    "status": await call("status", {"id": i}),
                    "get_chain": await call("get_chain", {"id": i}),
                    "resolve": await call(
                        "classify_and_resolve", {"resolutions": [fail], "dry_run": False}
                    ),
                    "recover": await call("recover", {"id": i, "dry_run": False}),
                }
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
