// OpenAI's Agents SDK and the Vercel AI SDK, each an agent with two
// function tools whose model is a superego flow, for api's
// TestAgentFrameworks: node agent_frameworks.mjs BASE_URL API_KEY MODEL.
// Each framework does the same task, once without streaming and once
// streaming: look up a city's weather, then e-mail it. The only change from
// an agent on OpenAI is the base URL and the model's name.
//
// It prints one JSON object: the versions, and for each task what the
// agent answered, which tool calls the framework ran (each tool counts its
// own invocations), and every response of the server as the framework's
// fetch read it, byte for byte.
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';
import { Agent, OpenAIChatCompletionsModel, run, setTracingDisabled, tool as agentTool } from '@openai/agents';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, stepCountIs, streamText, tool as aiTool } from 'ai';
import { z } from 'zod';

const [baseURL, apiKey, model] = process.argv.slice(2);
setTracingDisabled(true); // nothing leaves for OpenAI's trace exporter

function version(pkg) {
  return JSON.parse(readFileSync(new URL(`./node_modules/${pkg}/package.json`, import.meta.url), 'utf8')).version;
}

// A task's record: what its tools ran, and what the server sent.
function newTask() {
  const task = { ran: [], responses: [] };
  // fetch as the frameworks call it, keeping a copy of each response.
  task.fetch = async (url, init) => {
    const res = await fetch(url, init);
    const copy = res.clone();
    task.responses.push(copy.text().then((body) => ({
      status: res.status,
      instance: res.headers.get('x-superego-instance-id'),
      body,
    })));
    return res;
  };
  task.weather = ({ city }, id) => {
    task.ran.push({ tool: 'get_weather', id, args: { city } });
    return `Sunny, 21°C in ${city}`;
  };
  task.email = ({ to, body }, id) => {
    task.ran.push({ tool: 'send_email', id, args: { to, body } });
    return `sent to ${to}`;
  };
  return task;
}

async function finish(task, out) {
  const responses = await Promise.all(task.responses);
  return { ...out, ran: task.ran, responses };
}

const weatherParams = z.object({ city: z.string().describe('The city.') });
const emailParams = z.object({ to: z.string().describe('The address.'), body: z.string().describe('The text.') });
const weatherHelp = 'The weather in a city, now.';
const emailHelp = 'Sends an e-mail.';

// OpenAI's Agents SDK, on the Chat Completions API.
async function agentsSDK(input, stream) {
  const task = newTask();
  const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, fetch: task.fetch });
  const agent = new Agent({
    name: 'assistant',
    instructions: 'Do what the user asks with your tools.',
    model: new OpenAIChatCompletionsModel(client, model),
    tools: [
      agentTool({ name: 'get_weather', description: weatherHelp, parameters: weatherParams,
        execute: (args, _ctx, details) => task.weather(args, details?.toolCall?.callId) }),
      agentTool({ name: 'send_email', description: emailHelp, parameters: emailParams,
        execute: (args, _ctx, details) => task.email(args, details?.toolCall?.callId) }),
    ],
  });
  let text = '';
  let output;
  if (stream) {
    const result = await run(agent, input, { stream: true, maxTurns: 6 });
    for await (const ev of result) {
      if (ev.type === 'raw_model_stream_event' && ev.data.type === 'output_text_delta') text += ev.data.delta;
    }
    await result.completed;
    if (result.error) throw result.error;
    output = result.finalOutput;
  } else {
    output = (await run(agent, input, { maxTurns: 6 })).finalOutput;
  }
  return finish(task, { output, streamed: text });
}

// The Vercel AI SDK, its OpenAI provider's Chat Completions model.
async function vercelAI(input, stream) {
  const task = newTask();
  const provider = createOpenAI({ baseURL, apiKey, fetch: task.fetch });
  const options = {
    model: provider.chat(model),
    prompt: input,
    maxRetries: 0,
    stopWhen: stepCountIs(6),
    tools: {
      get_weather: aiTool({ description: weatherHelp, inputSchema: weatherParams,
        execute: (args, { toolCallId }) => task.weather(args, toolCallId) }),
      send_email: aiTool({ description: emailHelp, inputSchema: emailParams,
        execute: (args, { toolCallId }) => task.email(args, toolCallId) }),
    },
  };
  if (!stream) {
    const result = await generateText(options);
    return finish(task, { output: result.text, steps: result.steps.map((s) => s.finishReason) });
  }
  const result = streamText(options);
  let text = '';
  for await (const part of result.fullStream) {
    if (part.type === 'text-delta') text += part.text;
    if (part.type === 'error') throw part.error;
  }
  const steps = await result.steps;
  return finish(task, { output: await result.text, streamed: text, steps: steps.map((s) => s.finishReason) });
}

const tasks = {
  agents: () => agentsSDK('What is the weather in Paris? E-mail it to me@example.com.', false),
  agents_stream: () => agentsSDK('What is the weather in Rome? E-mail it to me@example.com.', true),
  ai_generate: () => vercelAI('What is the weather in Oslo? E-mail it to me@example.com.', false),
  ai_stream: () => vercelAI('What is the weather in Lima? E-mail it to me@example.com.', true),
};

const results = {
  versions: { node: process.version, '@openai/agents': version('@openai/agents'), ai: version('ai'), '@ai-sdk/openai': version('@ai-sdk/openai'), openai: version('openai') },
};
for (const [name, task] of Object.entries(tasks)) {
  try {
    results[name] = await task();
  } catch (e) {
    results[name] = { thrown: String(e?.stack ?? e) };
  }
}
console.log(JSON.stringify(results));
