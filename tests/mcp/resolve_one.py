#!/usr/bin/env python3
"""An agent resolving one pending_failed chain over MCP (official Python SDK).

Used by tests/real_slurm.rs. Usage: resolve_one.py SUPERVISORCTL CONFIG JOB MEM

Lists the pending chains, finds JOB's, resolves it with `retry` and MEM (dry run first),
then tries to resolve it again. Prints one JSON object with every answer.
"""

import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters, stdio_client


def result(r):
    d = r.model_dump(mode="json", by_alias=True)
    return {"is_error": bool(d.get("isError")), "structured": d.get("structuredContent")}


async def main(ctl, config, job, mem):
    server = StdioServerParameters(command=ctl, args=["--config", config, "mcp"])
    out = {}
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()

            async def call(name, args):
                return result(await session.call_tool(name, args))

            pending = await call("list_pending_failed", {})
            mine = [c for c in pending["structured"]["chains"] if c["slurm_job_id"] == job]
            out["pending"] = mine
            if not mine:
                print(json.dumps(out))
                return
            retry = {"id": mine[0]["id"], "action": "retry", "mem": mem, "confidence": 0.9,
                     "reason": "stderr shows a storage hiccup: transient; more memory for safety"}
            out["dry_run"] = await call("classify_and_resolve", {"resolutions": [retry], "dry_run": True})
            out["resolve"] = await call("classify_and_resolve", {"resolutions": [retry], "dry_run": False})
            out["second"] = await call("classify_and_resolve", {"resolutions": [retry], "dry_run": False})
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
