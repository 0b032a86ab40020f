// Drives Anthropic's TypeScript SDK against the server, as an agent built
// on it would: node anthropic_sdk.mjs BASE_URL KEY OTHER_KEY MODEL...
// For each model: messages.create and messages.stream with tools, each
// continued with the call's tool_result, and a refused input; then keys,
// errors, count_tokens and models.list. It prints what the program saw,
// as one JSON object; the Go test reads it.
import Anthropic from '@anthropic-ai/sdk';

const [baseURL, key, otherKey, ...models] = process.argv.slice(2);
const client = new Anthropic({ baseURL, apiKey: key, maxRetries: 0 });
const tools = [
  { name: 'write_file', description: 'Writes a file.', input_schema: { type: 'object', properties: { path: { type: 'string' }, content: { type: 'string' } }, required: ['path', 'content'] } },
  { name: 'send_money', description: 'Pays someone.', input_schema: { type: 'object', properties: { to: { type: 'string' }, amount: { type: 'number' } } } },
];
const ask = { role: 'user', content: 'Write a.txt and pay eve' };

// seen is a message as the program reads it.
const seen = (m, requestID) => ({ id: m.id, stop_reason: m.stop_reason, stop_details: m.stop_details ?? null, content: m.content, usage: m.usage, request_id: requestID });

// thrown is an error as the program reads it.
const thrown = (e) => ({ class: e.constructor.name, status: e.status ?? null, type: e.error?.error?.type ?? null, message: e.error?.error?.message ?? e.message, request_id: e.requestID ?? null });

async function attempt(fn) {
  try {
    return { returned: await fn() };
  } catch (e) {
    return { thrown: thrown(e) };
  }
}

// streamed runs messages.stream, keeping every event the program is given.
async function streamed(params) {
  const s = client.messages.stream(params);
  const events = [];
  let inputJSON = '';
  let text = '';
  s.on('streamEvent', (e) => events.push(e));
  s.on('inputJson', (d) => { inputJSON += d; });
  s.on('text', (d) => { text += d; });
  const m = await s.finalMessage();
  return { ...seen(m, s.request_id), events, input_json: inputJSON, text };
}

// continued is the conversation after a reply's calls, each answered.
const continued = (reply) => [ask, { role: 'assistant', content: reply.content },
  { role: 'user', content: reply.content.filter((b) => b.type === 'tool_use').map((b) => ({ type: 'tool_result', tool_use_id: b.id, content: 'wrote 2 bytes' })) }];

const out = { models: {} };
for (const model of models) {
  const base = { model, max_tokens: 1024, system: 'You write files.', tools };
  const r = (out.models[model] = {});
  const created = await client.messages.create({ ...base, messages: [ask] }).withResponse();
  r.create = seen(created.data, created.request_id);
  const next = await client.messages.create({ ...base, messages: continued(created.data) }).withResponse();
  r.create_continued = seen(next.data, next.request_id);
  r.stream = await streamed({ ...base, messages: [ask] });
  r.stream_continued = await streamed({ ...base, messages: continued(r.stream) });
  const bomb = { ...base, messages: [{ role: 'user', content: 'How do I build a bomb?' }] };
  const refused = await client.messages.create(bomb).withResponse();
  r.refusal = seen(refused.data, refused.request_id);
  r.refusal_stream = await streamed(bomb);
}

const plain = { model: models[0], max_tokens: 100, tools, messages: [{ role: 'user', content: 'Write a.txt' }] };
// The SDK sends its key as Authorization: Bearer; Claude Code's own
// client sends x-api-key.
out.x_api_key = await attempt(async () => (await new Anthropic({ baseURL, apiKey: null, defaultHeaders: { 'x-api-key': key }, maxRetries: 0 }).messages.create(plain)).stop_reason);
out.other_key = await attempt(async () => (await new Anthropic({ baseURL, authToken: otherKey, maxRetries: 0 }).messages.create(plain)).stop_reason);
out.wrong_key = await attempt(() => new Anthropic({ baseURL, apiKey: 'sk-wrong', maxRetries: 0 }).messages.create(plain));
out.no_max_tokens = await attempt(() => client.messages.create({ model: models[0], messages: plain.messages }));
out.unknown_model = await attempt(() => client.messages.create({ ...plain, model: 'no_such_flow' }));
out.bad_block = await attempt(() => client.messages.create({ ...plain, messages: [{ role: 'user', content: [{ type: 'search_result', source: 'x', title: 't', content: [] }] }] }));
out.count_tokens = await attempt(() => client.messages.countTokens({ model: models[0], system: 'You write files.', tools, messages: [ask] }));
out.models_list = await attempt(async () => {
  const list = [];
  for await (const m of client.models.list()) list.push(m);
  return list;
});
console.log(JSON.stringify(out));
