// POST /v1/responses driven by the official `openai` npm client: responses.create (string and
// item input, instructions, previous_response_id chains, store: false, GET and DELETE), the
// stream of Responses events (create with stream: true, and the responses.stream helper with
// finalResponse()), a function-tool round trip on g4's Gemma-4-format test templates, reasoning
// items from the thought channel, and the 400s. The oracle for text and prompts is the chat
// completions route (tested on its own in openai_client_test.mjs): a Responses request must
// produce exactly what the chat request it means produces.
//   node tests/server/responses_client_test.mjs   (G4_BINARY_DIR, G4_SERVE_TEST_MODEL optional)
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { copyFileSync, existsSync, mkdtempSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { assets, atExit, haveBinary, metric, run, skipUnless, sourceDir, startServer, test, testModel, until, g4 } from './harness.mjs';

const clientPath = path.join(assets, 'npm/node_modules/openai/package.json');
skipUnless(existsSync(clientPath), `the openai npm package is not installed (${clientPath}); run tools/setup.sh`);
skipUnless(haveBinary(), `no g4 binary at ${g4}`);
const OpenAI = createRequire(clientPath)('openai');

const model = testModel();
const main = await startServer(model, ['--parallel', '4', '--ctx', '512']);
const client = new OpenAI({ baseURL: main.url + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 120000 });
const greedy = { temperature: 0 };

async function expectError(promise, status, pattern, param, code) {
  try {
    await promise;
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIError, String(e));
    assert.equal(e.status, status, e.message);
    if (pattern) assert.match(e.message, pattern);
    if (param !== undefined) assert.equal(e.param, param);
    if (code !== undefined) assert.equal(e.code, code);
    return e;
  }
  assert.fail(`expected HTTP ${status}`);
}

// The chat request a Responses request means, answered by the chat route.
const chat = (messages, max_tokens, extra = {}) =>
  client.chat.completions.create({ model: 'm', messages, max_tokens, ...greedy, ...extra });

function checkAgainstChat(r, c) {
  assert.equal(r.output_text, c.choices[0].message.content);
  assert.equal(r.usage.input_tokens, c.usage.prompt_tokens);
  assert.equal(r.usage.output_tokens, c.usage.completion_tokens);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
  const finish = c.choices[0].finish_reason;
  assert.equal(r.status, finish === 'length' ? 'incomplete' : 'completed');
  if (finish === 'length') assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
}

let reference;
test('create: string input equals the chat answer to one user message', async () => {
  const r = await client.responses.create({ model: 'm', input: 'Hello there', max_output_tokens: 12, ...greedy });
  reference = r;
  assert.match(r.id, /^resp_/);
  assert.equal(r.object, 'response');
  assert.equal(r.output.length, 1);
  const [msg] = r.output;
  assert.equal(msg.type, 'message');
  assert.equal(msg.role, 'assistant');
  assert.match(msg.id, /^msg_/);
  assert.equal(msg.content[0].type, 'output_text');
  assert.equal(r.max_output_tokens, 12);
  assert.equal(typeof r.created_at, 'number');
  checkAgainstChat(r, await chat([{ role: 'user', content: 'Hello there' }], 12));
});

test('create: instructions and item input (roles, input_text parts, assistant output_text)', async () => {
  const input = [
    { role: 'developer', content: 'Answer in one word.' },
    { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Hi ' }, { type: 'input_text', text: 'there' }] },
    { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Hello!', annotations: [] }] },
    { role: 'user', content: 'Again' },
  ];
  const r = await client.responses.create({ model: 'm', instructions: 'Be brief.', input, max_output_tokens: 6, ...greedy });
  assert.equal(r.instructions, 'Be brief.');
  checkAgainstChat(r, await chat([
    { role: 'system', content: 'Be brief.' }, { role: 'developer', content: 'Answer in one word.' },
    { role: 'user', content: 'Hi there' }, { role: 'assistant', content: 'Hello!' }, { role: 'user', content: 'Again' }], 6));
});

test('create: a turn that ends by itself is completed, with usage', async () => {
  // <turn|> ends the model's turn: biased to come first, the answer is empty and complete.
  const [end] = (await (await fetch(main.url + '/tokenize', { method: 'POST', body: JSON.stringify({ content: '<turn|>' }) })).json()).tokens;
  const r = await client.responses.create({ model: 'm', input: 'Hi', max_output_tokens: 8, ...greedy, logit_bias: { [end]: 100 } });
  assert.equal(r.status, 'completed');
  assert.equal(r.incomplete_details, null);
  assert.equal(r.output_text, '');
  assert.equal(r.output[0].status, 'completed');
  assert.equal(r.usage.output_tokens, 1);
  assert.equal(r.usage.output_tokens_details.reasoning_tokens, 0);
  assert.equal(typeof r.usage.input_tokens_details.cached_tokens, 'number');
});

test('previous_response_id chains turns; store: false is not kept; GET and DELETE', async () => {
  const first = await client.responses.create({ model: 'm', input: 'Hi', instructions: 'Be kind.', max_output_tokens: 4, ...greedy });
  const second = await client.responses.create({ model: 'm', previous_response_id: first.id, input: 'And then?', max_output_tokens: 4, ...greedy });
  assert.equal(second.previous_response_id, first.id);
  // Instructions are not carried over (as OpenAI does): the chain is the turns alone.
  checkAgainstChat(second, await chat([{ role: 'user', content: 'Hi' }, { role: 'assistant', content: first.output_text },
    { role: 'user', content: 'And then?' }], 4));
  const third = await client.responses.create({ model: 'm', previous_response_id: second.id, input: [{ role: 'user', content: 'Last' }], max_output_tokens: 3, ...greedy });
  checkAgainstChat(third, await chat([{ role: 'user', content: 'Hi' }, { role: 'assistant', content: first.output_text },
    { role: 'user', content: 'And then?' }, { role: 'assistant', content: second.output_text }, { role: 'user', content: 'Last' }], 3));
  const got = await client.responses.retrieve(first.id);
  assert.deepEqual(got, first);
  const gone = await client.responses.delete(first.id);
  assert.deepEqual(gone, { id: first.id, object: 'response.deleted', deleted: true });
  await expectError(client.responses.retrieve(first.id), 404, /not found/);
  await expectError(client.responses.delete(first.id), 404, /not found/);
  await expectError(client.responses.create({ model: 'm', previous_response_id: first.id, input: 'x' }), 400, /not found/,
    'previous_response_id', 'previous_response_not_found');
  // The rest of the chain stays.
  assert.equal((await client.responses.retrieve(second.id)).id, second.id);
  const unstored = await client.responses.create({ model: 'm', input: 'Hi', max_output_tokens: 2, store: false });
  assert.equal(unstored.store, false);
  await expectError(client.responses.retrieve(unstored.id), 404);
  await expectError(client.responses.create({ model: 'm', previous_response_id: unstored.id, input: 'x' }), 400, /not found/, 'previous_response_id');
});

test('--responses-store N keeps the N most recently used responses', async () => {
  const one = await startServer(model, ['--parallel', '1', '--ctx', '128', '--responses-store', '2']);
  const c = new OpenAI({ baseURL: one.url + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 60000 });
  const ids = [];
  for (const input of ['a', 'b']) ids.push((await c.responses.create({ model: 'm', input, max_output_tokens: 1 })).id);
  await c.responses.retrieve(ids[0]);  // a is now the most recently used
  ids.push((await c.responses.create({ model: 'm', input: 'c', max_output_tokens: 1 })).id);
  await expectError(c.responses.retrieve(ids[1]), 404);
  assert.equal((await c.responses.retrieve(ids[0])).id, ids[0]);
  assert.equal((await c.responses.retrieve(ids[2])).id, ids[2]);
});

// Event order for one message: what OpenAI sends, numbered from 0.
function checkMessageEvents(events, final) {
  const types = events.map((e) => e.type);
  events.forEach((e, i) => assert.equal(e.sequence_number, i));
  const deltas = types.filter((t) => t === 'response.output_text.delta').length;
  assert.ok(deltas >= 1);
  assert.deepEqual(types, [
    'response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added',
    ...Array(deltas).fill('response.output_text.delta'), 'response.output_text.done', 'response.content_part.done',
    'response.output_item.done', final]);
  assert.equal(events[0].response.status, 'in_progress');
  const last = events[events.length - 1].response;
  const id = last.output[0].id;
  for (const e of events.slice(2, -1)) assert.equal(e.item_id ?? e.item.id, id);
  return events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
}

test('stream: true gives the Responses events in order, and the same text as create', async () => {
  const stream = await client.responses.create({ model: 'm', input: 'Hello there', max_output_tokens: 12, ...greedy, stream: true });
  const events = [];
  for await (const e of stream) events.push(e);
  const text = checkMessageEvents(events, 'response.incomplete');
  assert.equal(text, reference.output_text);
  const last = events[events.length - 1].response;
  assert.equal(last.status, reference.status);
  assert.deepEqual(last.usage.output_tokens, reference.usage.output_tokens);
  assert.equal(last.output[0].content[0].text, reference.output_text);
  assert.equal(events.find((e) => e.type === 'response.output_text.done').text, reference.output_text);
});

test('responses.stream helper: deltas, finalResponse() equal to the non-streamed response', async () => {
  let deltas = '';
  const stream = client.responses.stream({ model: 'm', input: 'Hello there', max_output_tokens: 12, ...greedy });
  stream.on('response.output_text.delta', (e) => { deltas += e.delta; });
  const events = [];
  for await (const e of stream) events.push(e);
  const final = await stream.finalResponse();
  checkMessageEvents(events, 'response.incomplete');
  assert.equal(deltas, reference.output_text);
  assert.equal(final.output_text, reference.output_text);
  assert.equal(final.status, 'incomplete');
  // The prompt's tokens may come from the slot's cache this time; the counts are the same.
  for (const k of ['input_tokens', 'output_tokens', 'total_tokens']) assert.equal(final.usage[k], reference.usage[k]);
  // A stored stream is retrievable like any response.
  const got = await client.responses.retrieve(final.id);
  assert.equal(got.output_text, reference.output_text);
});

test('a client that leaves a stream frees its slot, and nothing is stored', async () => {
  const abort = new AbortController();
  const stream = await client.responses.create({ model: 'm', input: 'x', max_output_tokens: 4000, ignore_eos: true, stream: true }, { signal: abort.signal });
  let id;
  for await (const e of stream) {
    if (e.type === 'response.created') id = e.response.id;
    if (e.type === 'response.output_text.delta') break;  // leaving the loop aborts the request
  }
  await until('the slot to come free', async () => (await metric(main.url, 'g4_slots_busy')) === 0);
  await expectError(client.responses.retrieve(id), 404);
});

test('errors: malformed and unsupported fields are 400s naming the Responses field', async () => {
  // text.format goes where chat's response_format goes: refused (or, once chat accepts it, answered)
  // exactly as chat completions does.
  const schema = { type: 'object', properties: { a: { type: 'integer' } }, required: ['a'] };
  for (const format of [{ type: 'json_object' }, { type: 'json_schema', name: 'n', schema, strict: true }]) {
    const { type, ...rest } = format;
    const response_format = type === 'json_schema' ? { type, json_schema: rest } : format;
    let chatError = null, chatAnswer = null;
    try { chatAnswer = await chat([{ role: 'user', content: 'x' }], 24, { response_format }); } catch (e) { chatError = e; }
    if (chatError) {
      const e = await expectError(client.responses.create({ model: 'm', input: 'x', max_output_tokens: 24, ...greedy, text: { format } }),
        chatError.status, undefined, 'text.format');
      assert.equal(e.error.message, chatError.error.message);
    } else {
      checkAgainstChat(await client.responses.create({ model: 'm', input: 'x', max_output_tokens: 24, ...greedy, text: { format } }), chatAnswer);
    }
  }
  await expectError(client.responses.create({ model: 'm', input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'https://x/y.png' }] }] }),
    400, /input_image/, 'input');
  await expectError(client.responses.create({ model: 'm', input: 'x', tools: [{ type: 'web_search' }] }), 400, /web_search/, 'tools');
  await expectError(client.responses.create({ model: 'm', input: 'x', max_output_tokens: -1 }), 400, /max_output_tokens/, 'max_output_tokens');
  await expectError(client.responses.create({ model: 'm', input: 'x', tool_choice: 'required' }), 400, /required/, 'tool_choice');
  await expectError(client.responses.create({ model: 'm', input: [{ type: 'function_call_output', output: 'x' }] }), 400, /call_id/, 'input');
  await expectError(client.responses.create({ model: 'm', input: 'x', background: true }), 400, /background/, 'background');
  await expectError(client.responses.create({ model: 'm' }), 400, /input/, 'input');
  const long = 'word '.repeat(600);
  const e = await expectError(client.responses.create({ model: 'm', input: long }), 400, /context/, 'input');
  assert.equal(e.code, 'context_length_exceeded');
});

// The function-tool round trip on g4's Gemma-4-format test templates (the chat test's set-up):
// a forced call comes back as a function_call item; its function_call_output, sent back by
// previous_response_id or with the whole history, continues the model turn exactly as the chat
// route's tool message does.
for (const variant of ['small', 'large']) {
  const dir = mkdtempSync(path.join(tmpdir(), `g4-responses-${variant}-`));
  atExit(() => rmSync(dir, { recursive: true, force: true }));
  for (const f of readdirSync(model)) symlinkSync(path.join(model, f), path.join(dir, f));
  copyFileSync(path.join(sourceDir, 'tests/templates', `gemma4_g4_${variant}.jinja`), path.join(dir, 'chat_template.jinja'));
  const server = await startServer(dir, ['--parallel', '2', '--ctx', '512']);
  const c = new OpenAI({ baseURL: server.url + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 120000 });
  const post = async (route, body) => (await fetch(server.url + route, { method: 'POST', body: JSON.stringify(body) })).json();
  const ids = async (text) => (await post('/tokenize', { content: text })).tokens;

  test(`function tool round trip on the ${variant}-variant template`, async () => {
    const tools = [{ type: 'function', name: 'get_weather', description: 'Weather now', parameters: { type: 'object', properties: {} } }];
    const opening = (await ids('<|tool_call>call:get_weather{')).length;
    const [brace] = await ids('}');
    const ask = { model: 'm', input: 'Weather?', tools, ...greedy };
    const first = await c.responses.create({ ...ask, tool_choice: 'required', max_output_tokens: opening + 1, logit_bias: { [brace]: 100 } });
    const call = first.output.find((o) => o.type === 'function_call');
    assert.ok(call, JSON.stringify(first));
    assert.equal(first.output.length, 1);
    assert.equal(call.name, 'get_weather');
    assert.equal(call.arguments, '{}');
    assert.match(call.call_id, /^call_/);
    assert.match(call.id, /^fc_/);
    assert.equal(call.status, 'incomplete');  // max_output_tokens cut the response before <tool_call|>
    assert.equal(first.status, 'incomplete');
    assert.deepEqual(first.tools, tools);
    // The named choice in Responses' flat shape works the same.
    const named = await c.responses.create({ ...ask, tool_choice: { type: 'function', name: 'get_weather' }, max_output_tokens: opening + 1, logit_bias: { [brace]: 100 } });
    assert.equal(named.output.find((o) => o.type === 'function_call').arguments, '{}');
    // The same call streamed: its item and argument events, and the same item at the end.
    const events = [];
    for await (const e of await c.responses.create({ ...ask, tool_choice: 'required', max_output_tokens: opening + 1, logit_bias: { [brace]: 100 }, stream: true })) events.push(e);
    const types = events.map((e) => e.type);
    assert.deepEqual(types.slice(2), ['response.output_item.added', 'response.function_call_arguments.delta',
      'response.function_call_arguments.done', 'response.output_item.done', 'response.incomplete']);
    assert.equal(events[4].arguments, '{}');
    const streamedCall = events[events.length - 1].response.output[0];
    assert.equal(streamedCall.name, 'get_weather');
    assert.equal(streamedCall.arguments, '{}');

    // The chat route's prompt for the same history: the oracle for both ways of continuing.
    const loop = [{ role: 'user', content: 'Weather?' },
      { role: 'assistant', content: null, tool_calls: [{ id: call.call_id, type: 'function', function: { name: 'get_weather', arguments: '{}' } }] },
      { role: 'tool', tool_call_id: call.call_id, content: '21 C' }];
    const chatTools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather now', parameters: { type: 'object', properties: {} } } }];
    const continued = (await post('/apply-template', { messages: loop, tools: chatTools })).prompt;
    assert.ok(continued.endsWith('<|tool_call>call:get_weather{}<tool_call|><|tool_response>response:get_weather{value:<|"|>21 C<|"|>}<tool_response|>'), continued);
    const answer = { type: 'function_call_output', call_id: call.call_id, output: '21 C' };
    const chained = await c.responses.create({ ...ask, input: [answer], previous_response_id: first.id, max_output_tokens: 3 });
    const stateless = await c.responses.create({ ...ask, input: [{ role: 'user', content: 'Weather?' }, ...first.output, answer], max_output_tokens: 3 });
    const viaChat = await c.chat.completions.create({ model: 'm', messages: loop, tools: chatTools, max_tokens: 3, ...greedy });
    for (const r of [chained, stateless]) {
      assert.equal(r.usage.input_tokens, (await ids(continued)).length);
      assert.equal(r.output_text, viaChat.choices[0].message.content);
    }

    // Thinking on (reasoning.effort): the continued turn opens a thought channel, so the text
    // comes back as a reasoning item whose summary is the thought, streamed as summary deltas.
    const [word] = await ids('weather');
    const piece = (await post('/detokenize', { tokens: [word] })).content;
    const think = { ...ask, input: [answer], previous_response_id: first.id, max_output_tokens: 3, reasoning: { effort: 'low' }, logit_bias: { [word]: 100 } };
    const thought = await c.responses.create(think);
    assert.equal(thought.output[0].type, 'reasoning');
    assert.match(thought.output[0].id, /^rs_/);
    assert.deepEqual(thought.output[0].summary, [{ type: 'summary_text', text: piece.repeat(3) }]);
    assert.equal(thought.output_text, '');
    assert.equal(thought.usage.output_tokens_details.reasoning_tokens, 3);
    assert.equal(thought.reasoning.effort, 'low');
    const thinkEvents = [];
    const s = c.responses.stream(think);
    for await (const e of s) thinkEvents.push(e.type);
    assert.deepEqual(thinkEvents.slice(2), ['response.output_item.added', 'response.reasoning_summary_part.added',
      ...Array(3).fill('response.reasoning_summary_text.delta'), 'response.reasoning_summary_text.done',
      'response.reasoning_summary_part.done', 'response.output_item.done', 'response.incomplete']);
    assert.deepEqual((await s.finalResponse()).output[0].summary, thought.output[0].summary);
  });
}

await run('responses client tests');
