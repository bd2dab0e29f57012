#!/usr/bin/env python3
"""An agent's session with `supervisorctl mcp`, driven by the official Python MCP SDK.

Used by tests/mcp.rs. Usage:

    client.py SUPERVISORCTL CONFIG JOB_A JOB_B

JOB_A and JOB_B are Slurm job ids of two chains waiting in pending_failed. The script
speaks MCP over stdio to `SUPERVISORCTL --config CONFIG mcp` and does what an agent would:
lists the tools and the pending chains, resolves chain A with `retry` and more memory
(dry run first), tries to resolve it a second time, resolves a batch of [A again, B with
`fail`], previews a manual recover of B, and reads A's history. It prints one JSON object
with every answer; the Rust test asserts on it.
"""

import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters, stdio_client


def result(r):
    """A tool result as plain JSON: isError, structuredContent and the text content."""
    d = r.model_dump(mode="json", by_alias=True)
    texts = [c.get("text") for c in d.get("content", []) if c.get("type") == "text"]
    return {
        "is_error": bool(d.get("isError")),
        "structured": d.get("structuredContent"),
        "text": texts[0] if texts else None,
    }


async def main(ctl, config, job_a, job_b):
    server = StdioServerParameters(command=ctl, args=["--config", config, "mcp"])
    out = {}
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            out["server"] = {
                "name": init.server_info.name,
                "instructions": init.instructions,
            }
            tools = await session.list_tools()
            out["tools"] = {
                t.name: {"description": t.description, "input_schema": t.input_schema}
                for t in tools.tools
            }

            async def call(name, args):
                return result(await session.call_tool(name, args))

            out["rules"] = await call("list_rule_proposals", {})
            pending = await call("list_pending_failed", {})
            out["pending"] = pending
            chains = pending["structured"]["chains"]

            def chain_of(job):
                for c in chains:
                    if c["slurm_job_id"] == job:
                        return c["id"]
                raise SystemExit(f"job {job} is not in list_pending_failed: {json.dumps(pending)}")

            a, b = chain_of(job_a), chain_of(job_b)
            out["chain_a"], out["chain_b"] = a, b

            retry_a = {
                "id": a,
                "action": "retry",
                "mem": "2G",
                "reason": "stderr shows a lost connection to the data server: transient",
            }
            out["dry_run"] = await call("classify_and_resolve", {"resolutions": [retry_a], "dry_run": True})
            out["after_dry_run"] = await call("status", {"id": a})
            out["resolve"] = await call("classify_and_resolve", {"resolutions": [retry_a], "dry_run": False})
            out["second"] = await call("classify_and_resolve", {"resolutions": [retry_a], "dry_run": False})
            fail_b = {"id": job_b, "action": "fail", "reason": "SyntaxError in the script: permanent"}
            out["batch"] = await call(
                "classify_and_resolve", {"resolutions": [retry_a, fail_b], "dry_run": False}
            )
            out["recover_b"] = await call("recover", {"id": b, "mem": "3G", "dry_run": True})
            out["history_a"] = await call("get_chain", {"id": a})
            out["unknown"] = await call("get_chain", {"id": "c99999"})
    print(json.dumps(out))


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    asyncio.run(main(*sys.argv[1:]))
