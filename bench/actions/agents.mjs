// The workload of bench/actions on OpenAI's Agents SDK for JavaScript: an
// assistant whose tools are those of an MCP server (the bench's test server
// at MCP_URL, over streamable HTTP, its "send" alone offered), each call
// put first to a tool input guardrail whose judge is an agent of its own.
// Both agents run on the fake model at OPENAI_BASE_URL, over Chat
// Completions, streamed (the fake streams every answer).
//
// It reads one JSON line per run on stdin, {"input": "..."}, runs the
// assistant to its end, and writes one JSON line per run on stdout: how the
// run ended, its final output, and how many calls the guardrail judged.
// The first line it writes names the versions. The timing is the Go
// side's, at the fake model and at the tool server.
import { createInterface } from 'node:readline';
import { readFileSync } from 'node:fs';
import {
  Agent,
  MCPServerStreamableHttp,
  ToolGuardrailFunctionOutputFactory,
  createMCPToolStaticFilter,
  defineToolInputGuardrail,
  run,
  setOpenAIAPI,
  setTracingDisabled,
} from '@openai/agents';

setOpenAIAPI('chat_completions');
setTracingDisabled(true); // nothing leaves for OpenAI's trace exporter

// The fake model tells the judge from the assistant by these words, and
// finds the judged call after "with these arguments:\n", as in our judges'
// messages.
const judge = new Agent({
  name: 'tool judge',
  instructions:
    'You are the tool judge. Accept a call the user asked for; block the rest. Reply {"decision": "ACCEPT"} or {"decision": "BLOCK"}.',
  model: 'fake-model',
});

let judged = 0;

const toolJudge = defineToolInputGuardrail({
  name: 'tool judge',
  run: async ({ toolCall }) => {
    const verdict = await run(
      judge,
      `The agent asks to call ${toolCall.name} with these arguments:\n${toolCall.arguments}`,
      { stream: true },
    );
    for await (const _ of verdict) {
      // drained: the run completes once its events are read
    }
    await verdict.completed;
    judged++;
    const decision = JSON.parse(verdict.finalOutput).decision;
    return decision === 'ACCEPT'
      ? ToolGuardrailFunctionOutputFactory.allow({ decision })
      : ToolGuardrailFunctionOutputFactory.rejectContent('refused by the tool judge', { decision });
  },
});

const web = new MCPServerStreamableHttp({
  url: process.env.MCP_URL,
  name: 'web',
  cacheToolsList: true, // as our server, which lists a server's tools once
  toolFilter: createMCPToolStaticFilter({ allowed: ['send'] }),
  toolInputGuardrails: [toolJudge],
});
await web.connect();

const assistant = new Agent({
  name: 'assistant',
  instructions: 'Send what the user asks with the send tool.',
  model: 'fake-model',
  mcpServers: [web],
});

function version(pkg) {
  const url = new URL(`./node_modules/${pkg}/package.json`, import.meta.url);
  return JSON.parse(readFileSync(url, 'utf8')).version;
}

async function once(input) {
  judged = 0;
  try {
    const result = await run(assistant, input, { stream: true });
    for await (const _ of result) {
      // read as the application would
    }
    await result.completed;
    if (result.error) throw result.error;
    return { outcome: 'completed', final: result.finalOutput, judged };
  } catch (e) {
    return { outcome: 'error', error: String(e?.stack ?? e), judged };
  }
}

console.log(JSON.stringify({
  sdk: version('@openai/agents'),
  openai: version('openai'),
  mcp_client: version('@modelcontextprotocol/client'),
  node: process.version,
}));
for await (const line of createInterface({ input: process.stdin })) {
  if (line.trim() === '') continue;
  console.log(JSON.stringify(await once(JSON.parse(line).input)));
}
await web.close();
