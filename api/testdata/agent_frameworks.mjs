// The agent frameworks users build with, from npm, each an agent with two
// function tools whose model is a superego flow, for api's
// TestAgentFrameworks: node agent_frameworks.mjs MODEL DIR. They are
// configured as their users configure them for OpenAI, by OPENAI_BASE_URL
// and OPENAI_API_KEY (and OPENAI_AGENTS_DISABLE_TRACING=1), with the flow's
// id as the model's: on the Chat Completions API, OpenAI's Agents SDK
// (OpenAIChatCompletionsModel), the Vercel AI SDK (@ai-sdk/openai's .chat
// and @ai-sdk/openai-compatible), OpenAI's own client and LangGraph's
// createReactAgent; on the Responses API, each one's default: the Agents
// SDK's model by name, @ai-sdk/openai's openai(...) and OpenAI's own client
// (responses.create); and LangGraph's agent with LangChain's
// useResponsesApi.
//
// Each does the same task with its own instructions, once without
// streaming and once streaming: look up a city's weather, then e-mail it.
// Its tools run here and leave their marks in DIR/TASK: every call they
// run is a line of ran.log, every e-mail sent a file of outbox/. Then a
// second turn on the first's history asks for a recap as structured output
// (outputType, Output.object, parse, withStructuredOutput, text.format).
//
// It prints one JSON object: the versions, and for each task what the
// agent answered and streamed, the recap, every request it sent and every
// response it read (as the framework's fetch read it, byte for byte), and
// any fetch that went elsewhere than OPENAI_BASE_URL.
import { appendFileSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const [model, dir] = process.argv.slice(2);
const baseURL = process.env.OPENAI_BASE_URL;

// task is the task being run: every fetch is recorded in it.
let task;
const realFetch = globalThis.fetch;
globalThis.fetch = async (input, init) => {
  const url = String(input?.url ?? input);
  const res = await realFetch(input, init);
  if (!url.startsWith(baseURL)) {
    task.elsewhere.push(url);
    return res;
  }
  const exchanges = task.recap ? task.recap.exchanges : task.exchanges;
  const copy = res.clone();
  exchanges.push(copy.text().then((body) => ({
    sent: typeof init?.body === 'string' ? init.body : null,
    status: res.status,
    instance: res.headers.get('x-superego-instance-id'),
    body,
  })));
  return res;
};
// The frameworks make their clients, which read fetch, once it is ours.
const { default: OpenAI } = await import('openai');
const { zodResponseFormat } = await import('openai/helpers/zod');
const { Agent, OpenAIChatCompletionsModel, run, tool: agentTool } = await import('@openai/agents');
const { openai } = await import('@ai-sdk/openai');
const { createOpenAICompatible } = await import('@ai-sdk/openai-compatible');
const { generateText, Output, stepCountIs, streamText, tool: aiTool } = await import('ai');
const { ChatOpenAI } = await import('@langchain/openai');
const { tool: langchainTool } = await import('@langchain/core/tools');
const { HumanMessage, SystemMessage } = await import('@langchain/core/messages');
const { createReactAgent } = await import('@langchain/langgraph/prebuilt');
const { z } = await import('zod');

function version(pkg) {
  return JSON.parse(readFileSync(new URL(`./node_modules/${pkg}/package.json`, import.meta.url), 'utf8')).version;
}

const weatherParams = z.object({ city: z.string().describe('The city.') });
const emailParams = z.object({ to: z.string().describe('The address.'), body: z.string().describe('The text.') });
const weatherHelp = 'The weather in a city, now.';
const emailHelp = 'Sends an e-mail.';
const recapAsk = 'Recap what you did.';
const Recap = z.object({ city: z.string(), weather: z.string(), emailed_to: z.string() });

// newTask is a task's record, and its tools, which act in DIR/NAME.
function newTask(name, input) {
  const at = join(dir, name);
  mkdirSync(join(at, 'outbox'), { recursive: true });
  const log = (tool, id, args) => appendFileSync(join(at, 'ran.log'), JSON.stringify({ tool, id, args }) + '\n');
  return {
    input,
    instructions: `INSTRUCTIONS-${name}: do what the user asks with your tools.`,
    exchanges: [],
    elsewhere: [],
    recap: null,
    weather({ city }, id) {
      log('get_weather', id, { city });
      return `Sunny, 21°C in ${city}`;
    },
    email({ to, body }, id) {
      log('send_email', id, { to, body });
      appendFileSync(join(at, 'outbox', to), body + '\n');
      return `sent to ${to}`;
    },
  };
}

// OpenAI's Agents SDK: on the Responses API with the model by name, its
// default; or its Chat Completions model.
async function agentsSDK(t, { stream, chat }) {
  const agent = new Agent({
    name: 'assistant',
    instructions: t.instructions,
    model: chat ? new OpenAIChatCompletionsModel(new OpenAI(), model) : model,
    tools: [
      agentTool({ name: 'get_weather', description: weatherHelp, parameters: weatherParams,
        execute: (args, _ctx, details) => t.weather(args, details?.toolCall?.callId) }),
      agentTool({ name: 'send_email', description: emailHelp, parameters: emailParams,
        execute: (args, _ctx, details) => t.email(args, details?.toolCall?.callId) }),
    ],
  });
  const ask = async (a, input) => {
    if (!stream) {
      const result = await run(a, input, { maxTurns: 6 });
      return { result, output: result.finalOutput };
    }
    const result = await run(a, input, { stream: true, maxTurns: 6 });
    let streamed = '';
    for await (const ev of result) {
      if (ev.type === 'raw_model_stream_event' && ev.data.type === 'output_text_delta') streamed += ev.data.delta;
    }
    await result.completed;
    if (result.error) throw result.error;
    return { result, output: result.finalOutput, streamed };
  };
  const first = await ask(agent, t.input);
  t.recap = { exchanges: [] };
  const recap = await ask(agent.clone({ outputType: Recap }), [...first.result.history, { role: 'user', content: recapAsk }]);
  return { output: first.output, streamed: first.streamed, recap: recap.output };
}

// The Vercel AI SDK, with one of its OpenAI providers' models.
async function vercelAI(t, { stream, model }) {
  const options = {
    model,
    system: t.instructions,
    maxRetries: 0,
    stopWhen: stepCountIs(6),
    tools: {
      get_weather: aiTool({ description: weatherHelp, inputSchema: weatherParams, execute: (args, { toolCallId }) => t.weather(args, toolCallId) }),
      send_email: aiTool({ description: emailHelp, inputSchema: emailParams, execute: (args, { toolCallId }) => t.email(args, toolCallId) }),
    },
  };
  const messages = [{ role: 'user', content: t.input }];
  const out = {};
  let history;
  if (!stream) {
    const result = await generateText({ ...options, messages });
    [out.output, out.steps, history] = [result.text, result.steps.map((s) => s.finishReason), result.responseMessages];
  } else {
    const result = streamText({ ...options, messages });
    out.streamed = '';
    for await (const part of result.fullStream) {
      if (part.type === 'text-delta') out.streamed += part.text;
      if (part.type === 'error') throw part.error;
    }
    [out.output, out.steps, history] = [await result.text, (await result.steps).map((s) => s.finishReason), await result.responseMessages];
  }
  // The second turn, from the first's messages, as an application keeps them.
  t.recap = { exchanges: [] };
  const recap = { ...options, output: Output.object({ schema: Recap }), messages: [...messages, ...history, { role: 'user', content: recapAsk }] };
  if (!stream) {
    out.recap = (await generateText(recap)).output;
  } else {
    const result = streamText(recap);
    for await (const part of result.fullStream) {
      if (part.type === 'error') throw part.error;
    }
    out.recap = await result.output;
  }
  return out;
}

// LangGraph's prebuilt agent on LangChain's ChatOpenAI; the recap is
// LangChain's withStructuredOutput on the agent's messages.
async function langGraph(t, { stream, responses }) {
  const llm = new ChatOpenAI({ model, maxRetries: 0, useResponsesApi: responses });
  const agent = createReactAgent({
    llm,
    prompt: t.instructions,
    tools: [
      langchainTool((args, config) => t.weather(args, config?.toolCall?.id), { name: 'get_weather', description: weatherHelp, schema: weatherParams }),
      langchainTool((args, config) => t.email(args, config?.toolCall?.id), { name: 'send_email', description: emailHelp, schema: emailParams }),
    ],
  });
  const input = { messages: [{ role: 'user', content: t.input }] };
  const out = {};
  let messages;
  if (!stream) {
    messages = (await agent.invoke(input)).messages;
  } else {
    out.streamed = '';
    for await (const [mode, data] of await agent.stream(input, { streamMode: ['messages', 'values'] })) {
      if (mode === 'values') messages = data.messages;
      if (mode === 'messages' && data[1].langgraph_node === 'agent') out.streamed += data[0].text;
    }
  }
  out.output = messages.at(-1).text; // the content's text, which is its content blocks' on Responses
  t.recap = { exchanges: [] };
  out.recap = await llm.withStructuredOutput(Recap).invoke([new SystemMessage(t.instructions), ...messages, new HumanMessage(recapAsk)]);
  return out;
}

// OpenAI's own client on the Chat Completions API, in a loop of its
// user's own, each request with the whole conversation; streaming, by its
// helper, which puts the chunks back together. The recap is its parse,
// with a JSON schema as response_format.
async function openaiChat(t, { stream }) {
  const client = new OpenAI({ maxRetries: 0 });
  const tools = [
    { type: 'function', function: { name: 'get_weather', description: weatherHelp,
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } },
    { type: 'function', function: { name: 'send_email', description: emailHelp,
      parameters: { type: 'object', properties: { to: { type: 'string' }, body: { type: 'string' } }, required: ['to', 'body'] } } },
  ];
  const messages = [{ role: 'system', content: t.instructions }, { role: 'user', content: t.input }];
  const out = { streamed: stream ? '' : undefined };
  for (let i = 0; i < 6; i++) {
    let message;
    if (!stream) {
      message = (await client.chat.completions.create({ model, messages, tools })).choices[0].message;
    } else {
      const s = client.chat.completions.stream({ model, messages, tools });
      s.on('content.delta', ({ delta }) => { out.streamed += delta; });
      message = (await s.finalChatCompletion()).choices[0].message;
    }
    messages.push(message);
    if (!message.tool_calls?.length) {
      out.output = message.content;
      break;
    }
    for (const c of message.tool_calls) {
      const run = c.function.name === 'get_weather' ? t.weather : t.email;
      messages.push({ role: 'tool', tool_call_id: c.id, content: run(JSON.parse(c.function.arguments), c.id) });
    }
  }
  t.recap = { exchanges: [] };
  const r = await client.chat.completions.parse({ model, messages: [...messages, { role: 'user', content: recapAsk }],
    response_format: zodResponseFormat(Recap, 'recap') });
  out.recap = r.choices[0].message.parsed;
  return out;
}

// OpenAI's own client on the Responses API, in a loop of its user's own:
// without streaming, each request continues the last by
// previous_response_id; streaming, each sends the whole conversation.
async function openaiResponses(t, { stream }) {
  const client = new OpenAI({ maxRetries: 0 });
  const tools = [
    { type: 'function', name: 'get_weather', description: weatherHelp, strict: true,
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false } },
    { type: 'function', name: 'send_email', description: emailHelp, strict: true,
      parameters: { type: 'object', properties: { to: { type: 'string' }, body: { type: 'string' } }, required: ['to', 'body'], additionalProperties: false } },
  ];
  const ask = async (body) => {
    if (!stream) return { response: await client.responses.create(body) };
    let streamed = '';
    let response;
    for await (const ev of await client.responses.create({ ...body, stream: true })) {
      if (ev.type === 'response.output_text.delta') streamed += ev.delta;
      if (ev.type === 'response.completed' || ev.type === 'response.incomplete') response = ev.response;
    }
    return { response, streamed };
  };
  const out = { streamed: stream ? '' : undefined };
  let input = [{ role: 'user', content: t.input }];
  let last;
  for (let i = 0; i < 6; i++) {
    const { response, streamed } = await ask({ model, instructions: t.instructions, tools, input, previous_response_id: stream ? undefined : last?.id });
    last = response;
    if (stream) out.streamed += streamed;
    const calls = response.output.filter((o) => o.type === 'function_call');
    if (calls.length === 0) break;
    const results = calls.map((c) => ({ type: 'function_call_output', call_id: c.call_id,
      output: (c.name === 'get_weather' ? t.weather : t.email)(JSON.parse(c.arguments), c.call_id) }));
    input = stream ? [...input, ...response.output, ...results] : results;
  }
  out.output = last.output.filter((o) => o.type === 'message').flatMap((o) => o.content).map((c) => c.text ?? '').join('');
  t.recap = { exchanges: [] };
  const format = { type: 'json_schema', name: 'recap', strict: true, schema: z.toJSONSchema(Recap) };
  if (!stream) {
    const r = await client.responses.create({ model, instructions: t.instructions, tools, previous_response_id: last.id, input: recapAsk, text: { format } });
    out.recap = JSON.parse(r.output_text);
  } else {
    // The client's helper, which checks every event it reads.
    const r = await client.responses.stream({ model, instructions: t.instructions, tools, text: { format },
      input: [...input, ...last.output, { role: 'user', content: recapAsk }] }).finalResponse();
    out.recap = JSON.parse(r.output_text);
  }
  return out;
}

// supportsStructuredOutputs: the server takes a JSON schema (without it,
// the provider asks for any JSON object, with no schema).
const compat = createOpenAICompatible({ name: 'superego', baseURL, apiKey: process.env.OPENAI_API_KEY, supportsStructuredOutputs: true });
const tasks = {
  agents_chat: (t) => agentsSDK(t, { chat: true }),
  agents_chat_stream: (t) => agentsSDK(t, { chat: true, stream: true }),
  ai_chat: (t) => vercelAI(t, { model: openai.chat(model) }),
  ai_chat_stream: (t) => vercelAI(t, { model: openai.chat(model), stream: true }),
  ai_compatible: (t) => vercelAI(t, { model: compat(model) }),
  ai_compatible_stream: (t) => vercelAI(t, { model: compat(model), stream: true }),
  openai_chat: (t) => openaiChat(t, {}),
  openai_chat_stream: (t) => openaiChat(t, { stream: true }),
  langgraph: (t) => langGraph(t, {}),
  langgraph_stream: (t) => langGraph(t, { stream: true }),
  agents: (t) => agentsSDK(t, {}),
  agents_stream: (t) => agentsSDK(t, { stream: true }),
  ai: (t) => vercelAI(t, { model: openai(model) }),
  ai_stream: (t) => vercelAI(t, { model: openai(model), stream: true }),
  langgraph_responses: (t) => langGraph(t, { responses: true }),
  langgraph_responses_stream: (t) => langGraph(t, { responses: true, stream: true }),
  openai_responses: (t) => openaiResponses(t, {}),
  openai_responses_stream: (t) => openaiResponses(t, { stream: true }),
};

const cities = ['Paris', 'Rome', 'Oslo', 'Lima'];
const results = { versions: { node: process.version } };
for (const pkg of ['openai', '@openai/agents', 'ai', '@ai-sdk/openai', '@ai-sdk/openai-compatible', '@langchain/openai', '@langchain/core', '@langchain/langgraph']) {
  results.versions[pkg] = version(pkg);
}
let i = 0;
for (const [name, job] of Object.entries(tasks)) {
  task = newTask(name, `What is the weather in ${cities[i++ % cities.length]}? E-mail it to me@example.com.`);
  let out;
  try {
    out = await job(task);
  } catch (e) {
    out = { thrown: String(e?.stack ?? e) };
  }
  out.input = task.input;
  out.instructions = task.instructions;
  out.exchanges = await Promise.all(task.exchanges);
  out.recap_exchanges = await Promise.all(task.recap?.exchanges ?? []);
  out.elsewhere = task.elsewhere;
  results[name] = out;
}
console.log(JSON.stringify(results));
