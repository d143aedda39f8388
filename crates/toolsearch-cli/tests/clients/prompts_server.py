"""An MCP server on the official Python SDK (low-level API) whose prompts and resources change
while it runs: it starts with the prompt `greet` and the resource `notes://greet`; its tool
`add_prompt` adds a prompt and sends `notifications/prompts/list_changed`, `add_resource` adds a
resource `notes://NAME` and sends `notifications/resources/list_changed`. Over stdio.

    python prompts_server.py
"""

import anyio
import mcp_types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server

PROMPTS = ["greet"]
RESOURCES = ["greet"]


async def list_prompts(ctx, params):
    return types.ListPromptsResult(
        prompts=[types.Prompt(name=name, description=f"The {name} prompt") for name in PROMPTS]
    )


async def get_prompt(ctx, params):
    if params.name not in PROMPTS:
        raise ValueError(f"Unknown prompt: {params.name}")
    text = f"This is the {params.name} prompt."
    return types.GetPromptResult(
        messages=[types.PromptMessage(role="user", content=types.TextContent(type="text", text=text))]
    )


async def list_resources(ctx, params):
    return types.ListResourcesResult(
        resources=[types.Resource(uri=f"notes://{name}", name=name) for name in RESOURCES]
    )


async def read_resource(ctx, params):
    name = str(params.uri).removeprefix("notes://")
    if name not in RESOURCES:
        raise ValueError(f"Unknown resource: {params.uri}")
    return types.ReadResourceResult(
        contents=[types.TextResourceContents(uri=str(params.uri), text=f"The {name} note.")]
    )


async def list_tools(ctx, params):
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    return types.ListToolsResult(
        tools=[
            types.Tool(name="add_prompt", description="Adds a prompt.", input_schema=schema),
            types.Tool(name="add_resource", description="Adds a resource.", input_schema=schema),
        ]
    )


async def call_tool(ctx, params):
    if params.name == "add_resource":
        RESOURCES.append(params.arguments["name"])
        await ctx.session.send_resource_list_changed()
    else:
        PROMPTS.append(params.arguments["name"])
        await ctx.session.send_prompt_list_changed()
    return types.CallToolResult(content=[types.TextContent(type="text", text="added")])


server = Server(
    "prompts-test-server",
    version="1.0.0",
    on_list_prompts=list_prompts,
    on_get_prompt=get_prompt,
    on_list_resources=list_resources,
    on_read_resource=read_resource,
    on_list_tools=list_tools,
    on_call_tool=call_tool,
)


async def main():
    options = server.create_initialization_options(NotificationOptions(prompts_changed=True, resources_changed=True))
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, options)


if __name__ == "__main__":
    anyio.run(main)
