'use strict';
// An independent MCP client: the TypeScript SDK starts `python -m corral mcp` over stdio,
// lists the tools, waits in next_item receiving progress, and completes the task it gets.
// Prints one JSON object per line; CORRAL_PYTHON, CORRAL_REPO and the credential come from the environment.

const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StdioClientTransport } = require('@modelcontextprotocol/sdk/client/stdio.js');
const { CallToolResultSchema } = require('@modelcontextprotocol/sdk/types.js');

function emit(event) {
  process.stdout.write(JSON.stringify(event) + '\n');
}

async function main() {
  const transport = new StdioClientTransport({
    command: process.env.CORRAL_PYTHON,
    args: ['-m', 'corral', 'mcp', '--progress-every', '500ms'],
    env: process.env,
    cwd: process.env.CORRAL_REPO,
    stderr: 'inherit',
  });
  let negotiated = null;
  transport.setProtocolVersion = (version) => { negotiated = version; };  // the client reports what it agreed
  const client = new Client({ name: 'corral-node-mcp', version: '1.0.0' });
  await client.connect(transport);
  emit({ event: 'connected', protocol: negotiated, server: client.getServerVersion() });

  const { tools } = await client.listTools();
  emit({ event: 'tools', names: tools.map((tool) => tool.name), output_schemas: tools.every((t) => !!t.outputSchema) });

  const progress = [];
  let item;
  for (let attempt = 0; attempt < 5; attempt++) {
    const answer = await client.callTool(
      { name: 'next_item', arguments: { wait_seconds: 10 } },
      CallToolResultSchema,
      { onprogress: (note) => progress.push(note), timeout: 60000 },
    );
    item = answer.structuredContent;
    if (item.kind === 'claim') break;
  }
  emit({ event: 'waited', kind: item.kind, progress: progress.length, last: progress[progress.length - 1] || null });

  const taskId = item.claim.task_id;
  const done = await client.callTool({ name: 'complete_task', arguments: { task_id: taskId, result: 'done by node' } });
  emit({ event: 'completed', task_id: taskId, is_error: !!done.isError, state: done.structuredContent.state });

  const refused = await client.callTool({ name: 'release_task', arguments: { task_id: taskId, owner: 'forged' } });
  emit({ event: 'refused', is_error: !!refused.isError, text: refused.content[0].text });

  await client.close();
  emit({ event: 'closed' });
}

main().catch((error) => {
  emit({ event: 'error', message: String(error && error.stack ? error.stack : error) });
  process.exit(1);
});
