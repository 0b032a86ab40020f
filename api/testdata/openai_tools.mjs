// OpenAI's JavaScript client (npm "openai") running a client's tools
// through a superego flow's /v1, for api's TestOpenAINodeClientTools:
// node openai_tools.mjs BASE_URL API_KEY MODEL. The calls come back in
// OpenAI's shape, the client runs them and sends the results, and the
// flow goes on.
//
// It prints one JSON object: for each scenario, each answer as the client
// read it (finish reason, content, the calls, the instance), or what the
// client threw.
import OpenAI from 'openai';

const [baseURL, apiKey, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });

const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'The weather in a city, now.',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } },
  { type: 'function', function: { name: 'send_email', description: 'Sends an e-mail.',
    parameters: { type: 'object', properties: { to: { type: 'string' }, body: { type: 'string' } }, required: ['to', 'body'] } } },
];

// run is what the client's code does with a call.
const ran = [];
function run(name, args) {
  ran.push(`${name} ${JSON.stringify(args)}`);
  return name === 'get_weather' ? `Sunny, 21°C in ${args.city}` : `sent to ${args.to}`;
}

function thrown(e) {
  if (!(e instanceof OpenAI.APIError)) return { thrown: String(e?.stack ?? e) };
  return { class: e.constructor.name, status: e.status ?? null, code: e.code ?? null, param: e.param ?? null, message: e.message };
}

// answer is a chat completion as the client read it.
function answer(data, response) {
  const choice = data.choices[0];
  return {
    finish_reason: choice.finish_reason,
    content: choice.message.content,
    tool_calls: (choice.message.tool_calls ?? []).map((c) => ({ id: c.id, type: c.type, name: c.function.name, arguments: c.function.arguments })),
    instance: response?.headers.get('x-superego-instance-id') ?? null,
  };
}

// results are the tool messages that answer an answer's calls.
function results(calls) {
  return calls.map((c) => ({ role: 'tool', tool_call_id: c.id, content: run(c.name, JSON.parse(c.arguments)) }));
}

function assistant(a) {
  return { role: 'assistant', content: null, tool_calls: a.tool_calls.map((c) => ({ id: c.id, type: c.type, function: { name: c.name, arguments: c.arguments } })) };
}

// loop asks, runs the calls, and sends the results back with the whole
// conversation until an answer has no calls.
async function loop(user, extra = {}) {
  const messages = [{ role: 'user', content: user }];
  const answers = [];
  while (answers.length < 6) {
    const { data, response } = await client.chat.completions.create({ model, messages, tools, ...extra }).withResponse();
    const a = answer(data, response);
    answers.push(a);
    if (a.tool_calls.length === 0) break;
    messages.push(assistant(a), ...results(a.tool_calls));
  }
  return answers;
}

// stream reads a streamed answer chunk by chunk: every tool_calls delta
// as it came, and the finish reason.
async function stream(messages) {
  const { data: chunks, response } = await client.chat.completions.create({ model, messages, tools, stream: true }).withResponse();
  const out = { deltas: [], content: '', finish_reason: null, instance: response.headers.get('x-superego-instance-id') };
  for await (const chunk of chunks) {
    for (const choice of chunk.choices) {
      for (const d of choice.delta.tool_calls ?? []) {
        out.deltas.push({ index: d.index, id: d.id ?? null, type: d.type ?? null, name: d.function?.name ?? null, arguments: d.function?.arguments ?? null });
      }
      out.content += choice.delta.content ?? '';
      out.finish_reason = choice.finish_reason ?? out.finish_reason;
    }
  }
  return out;
}

const scenarios = {
  // Two calls in one answer; then the answer.
  parallel: () => loop('What is the weather in Paris and Rome?'),
  // parallel_tool_calls false: one call an answer.
  sequential: () => loop('What is the weather in Paris and Rome?', { parallel_tool_calls: false }),
  // A call the judge refuses never comes; the model reads the refusal.
  refused: () => loop('What is the weather in Oslo? E-mail it to boss@evil.example.'),
  // tool_choice "required" reaches the agent's model.
  required: () => loop('What is the weather in Lima?', { tool_choice: 'required' }),
  // Streamed: the calls as delta.tool_calls, then the results, streamed
  // again.
  stream: async () => {
    const messages = [{ role: 'user', content: 'What is the weather in Paris and Rome?' }];
    const first = await stream(messages);
    const calls = first.deltas.map((d) => ({ id: d.id, type: d.type, name: d.name, arguments: d.arguments }));
    messages.push(assistant({ tool_calls: calls }), ...results(calls));
    return [first, await stream(messages)];
  },
  // The client's own tool loop, streamed, which puts the deltas together
  // and runs the functions itself.
  run_tools: async () => {
    const runner = client.chat.completions.runTools({
      model, stream: true,
      messages: [{ role: 'user', content: 'What is the weather in Oslo? E-mail it to me@example.com.' }],
      tools: tools.map((t) => ({ type: 'function', function: { ...t.function, parse: JSON.parse, function: (args) => run(t.function.name, args) } })),
    });
    const content = await runner.finalContent();
    const calls = runner.messages.filter((m) => m.role === 'assistant').flatMap((m) => m.tool_calls ?? []).map((c) => c.function.name);
    return { content, calls };
  },
  // Results for one of an answer's two calls: a 400 naming the other.
  partial: async () => {
    const messages = [{ role: 'user', content: 'What is the weather in Paris and Rome?' }];
    const { data, response } = await client.chat.completions.create({ model, messages, tools }).withResponse();
    const a = answer(data, response);
    messages.push(assistant(a), ...results(a.tool_calls.slice(0, 1)));
    try {
      await client.chat.completions.create({ model, messages, tools });
      return { missing: a.tool_calls[1]?.id, error: null };
    } catch (e) {
      return { missing: a.tool_calls[1]?.id, error: thrown(e) };
    }
  },
  // A history with a call this server never sent: a new instance.
  forged: async () => {
    const id = 'call_00000000000000000000000000000000';
    const messages = [
      { role: 'user', content: 'What is the weather in Paris?' },
      { role: 'assistant', content: null, tool_calls: [{ id, type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
      { role: 'tool', tool_call_id: id, content: 'Sunny, 21°C in Paris' },
    ];
    const { data, response } = await client.chat.completions.create({ model, messages, tools }).withResponse();
    return answer(data, response);
  },
  // A tool_choice that names no tool of the request.
  bad_choice: () => client.chat.completions.create({ model, tools, tool_choice: { type: 'function', function: { name: 'nope' } },
    messages: [{ role: 'user', content: 'What is the weather in Paris?' }] }),
};

const out = {};
for (const [name, scenario] of Object.entries(scenarios)) {
  const before = ran.length;
  try {
    out[name] = { result: await scenario() };
  } catch (e) {
    out[name] = { error: thrown(e) };
  }
  out[name].ran = ran.slice(before);
}
console.log(JSON.stringify(out));
