// g4 serve driven by the official `openai` npm client (streaming and not): every route the client
// speaks, every request field, the error paths (400/401/404/429), timeouts, disconnects, and 32
// simultaneous streaming clients whose greedy outputs must equal the same request run alone.
//   node tests/server/openai_client_test.mjs        (G4_BINARY_DIR, G4_SERVE_TEST_MODEL optional)
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
const CTX = 512;
const main = await startServer(model, ['--parallel', '16', '--ctx', String(CTX), '--max-queue', '64']);
const client = new OpenAI({ baseURL: main.url + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 120000 });
const user = (content) => [{ role: 'user', content }];
const greedy = { temperature: 0 };

async function collectChat(stream) {
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  return chunks;
}

test('models.list names the model and its context', async () => {
  const page = await client.models.list();
  assert.equal(page.data.length, 1);
  assert.equal(page.data[0].object, 'model');
  assert.equal(page.data[0].id, path.basename(model));
});

let referenceChat;
test('chat.completions: non-streaming greedy answer with usage', async () => {
  const r = await client.chat.completions.create({ model: 'm', messages: user('Hello there'), max_tokens: 12, ...greedy });
  referenceChat = r;
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(['length', 'stop'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 5);
  assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 12);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
});

test('chat.completions: streaming gives role first, same text, finish_reason, usage', async () => {
  const stream = await client.chat.completions.create({
    model: 'm', messages: user('Hello there'), max_tokens: 12, ...greedy, stream: true, stream_options: { include_usage: true },
  });
  const chunks = await collectChat(stream);
  assert.equal(chunks[0].object, 'chat.completion.chunk');
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  const text = chunks.filter((c) => c.choices.length).map((c) => c.choices[0].delta.content || '').join('');
  assert.equal(text, referenceChat.choices[0].message.content);
  const finals = chunks.filter((c) => c.choices.length && c.choices[0].finish_reason);
  assert.equal(finals.length, 1);
  assert.equal(finals[0].choices[0].finish_reason, referenceChat.choices[0].finish_reason);
  const usage = chunks[chunks.length - 1];
  assert.equal(usage.choices.length, 0);
  assert.deepEqual(
    [usage.usage.prompt_tokens, usage.usage.completion_tokens],
    [referenceChat.usage.prompt_tokens, referenceChat.usage.completion_tokens]);
  // No usage chunk unless asked.
  const plain = await collectChat(await client.chat.completions.create({ messages: user('Hello there'), max_tokens: 3, ...greedy, stream: true, model: 'm' }));
  assert.ok(plain.every((c) => !c.usage));
});

test('chat: system prompt and multi-turn history change the prompt', async () => {
  const one = await client.chat.completions.create({ model: 'm', messages: user('Hi'), max_tokens: 1, ...greedy });
  const multi = await client.chat.completions.create({
    model: 'm', max_tokens: 1, ...greedy,
    messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi' },
      { role: 'assistant', content: 'Hello!' }, { role: 'user', content: [{ type: 'text', text: 'Again' }] }],
  });
  assert.ok(multi.usage.prompt_tokens > one.usage.prompt_tokens + 5);
});

let referenceText;
test('completions: raw text (no chat template), prompt as ids gives the same tokens', async () => {
  const r = await client.completions.create({ model: 'm', prompt: 'The quick brown fox', max_tokens: 16, ...greedy });
  referenceText = r.choices[0].text;
  assert.equal(r.object, 'text_completion');
  assert.equal(r.usage.completion_tokens, 16);
  // Raw completion: BOS + the text, no turn markers.
  const tok = await (await fetch(main.url + '/tokenize', { method: 'POST', body: JSON.stringify({ content: 'The quick brown fox', add_special: true }) })).json();
  assert.equal(r.usage.prompt_tokens, tok.tokens.length);
  const byIds = await client.completions.create({ model: 'm', prompt: tok.tokens, max_tokens: 16, ...greedy });
  assert.equal(byIds.choices[0].text, referenceText);
  const stream = await client.completions.create({ model: 'm', prompt: 'The quick brown fox', max_tokens: 16, ...greedy, stream: true });
  let streamed = '';
  let finish = null;
  for await (const c of stream) { streamed += c.choices[0]?.text || ''; finish = c.choices[0]?.finish_reason || finish; }
  assert.equal(streamed, referenceText);
  assert.equal(finish, 'length');
});

test('stop strings are matched across token boundaries and trimmed', async () => {
  const k = Math.floor(referenceText.length / 2);
  let stop = referenceText.slice(k, k + 3);
  const at = referenceText.indexOf(stop);
  const r = await client.completions.create({ model: 'm', prompt: 'The quick brown fox', max_tokens: 16, ...greedy, stop: ['@@never@@', stop] });
  assert.equal(r.choices[0].text, referenceText.slice(0, at));
  assert.equal(r.choices[0].finish_reason, 'stop');
  const s = await client.completions.create({ model: 'm', prompt: 'The quick brown fox', max_tokens: 16, ...greedy, stop, stream: true });
  let streamed = '';
  for await (const c of s) streamed += c.choices[0]?.text || '';
  assert.equal(streamed, referenceText.slice(0, at));
});

test('seed: same seed same output; sampling fields are accepted', async () => {
  const req = { model: 'm', prompt: 'Once upon a time', max_tokens: 12, temperature: 1.0, top_p: 0.9, top_k: 50, min_p: 0.01 };
  const a = await client.completions.create({ ...req, seed: 1234 });
  const b = await client.completions.create({ ...req, seed: 1234 });
  assert.equal(a.choices[0].text, b.choices[0].text);
  const outs = new Set();
  for (const seed of [1, 2, 3, 4]) outs.add((await client.completions.create({ ...req, seed })).choices[0].text);
  assert.ok(outs.size > 1, 'different seeds should differ');
  const pen = await client.completions.create({
    model: 'm', prompt: 'Once upon a time', max_tokens: 24, ...greedy,
    presence_penalty: 1.5, frequency_penalty: 1.5, repetition_penalty: 1.3,
  });
  assert.equal(pen.choices[0].finish_reason, 'length');
});

test('logit_bias forces a token', async () => {
  const tok = await (await fetch(main.url + '/tokenize', { method: 'POST', body: JSON.stringify({ content: ' banana' }) })).json();
  const id = tok.tokens[0];
  const r = await client.completions.create({ model: 'm', prompt: 'x', max_tokens: 3, ...greedy, logit_bias: { [id]: 100 } });
  const expected = await (await fetch(main.url + '/detokenize', { method: 'POST', body: JSON.stringify({ tokens: [id, id, id] }) })).json();
  assert.equal(r.choices[0].text, expected.content);
});

test('logprobs: chat (content entries, top_logprobs) and completions (legacy arrays)', async () => {
  const r = await client.chat.completions.create({ model: 'm', messages: user('Hi'), max_tokens: 5, ...greedy, logprobs: true, top_logprobs: 3, ignore_eos: true });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, 5);
  for (const e of content) {
    assert.ok(e.logprob <= 0);
    assert.equal(e.top_logprobs.length, 3);
    assert.equal(e.top_logprobs[0].token, e.token);  // greedy picks the most likely
    assert.ok(Array.isArray(e.bytes));
  }
  const s = await collectChat(await client.chat.completions.create({ model: 'm', messages: user('Hi'), max_tokens: 5, ...greedy, logprobs: true, top_logprobs: 2, stream: true, ignore_eos: true }));
  const streamed = s.flatMap((c) => c.choices[0]?.logprobs?.content || []);
  assert.equal(streamed.length, 5);
  assert.deepEqual(streamed.map((e) => e.token), content.map((e) => e.token));
  const c = await client.completions.create({ model: 'm', prompt: 'Hi', max_tokens: 4, ...greedy, logprobs: 2 });
  const lp = c.choices[0].logprobs;
  assert.equal(lp.tokens.length, 4);
  assert.equal(lp.token_logprobs.length, 4);
  assert.equal(Object.keys(lp.top_logprobs[0]).length, 2);
  assert.equal(lp.tokens.join(''), c.choices[0].text);
});

test('tools and tool history are rendered; reasoning comes back as reasoning_content', async () => {
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather for a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
  const plain = await client.chat.completions.create({ model: 'm', messages: user('Weather in Paris?'), max_tokens: 1, ...greedy });
  const withTools = await client.chat.completions.create({ model: 'm', messages: user('Weather in Paris?'), max_tokens: 1, ...greedy, tools, tool_choice: 'auto' });
  assert.ok(withTools.usage.prompt_tokens > plain.usage.prompt_tokens + 10);
  const none = await client.chat.completions.create({ model: 'm', messages: user('Weather in Paris?'), max_tokens: 1, ...greedy, tools, tool_choice: 'none' });
  assert.equal(none.usage.prompt_tokens, plain.usage.prompt_tokens);
  const history = await client.chat.completions.create({
    model: 'm', max_tokens: 2, ...greedy, tools,
    messages: [...user('Weather in Paris?'),
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temp_c": 21}' }],
  });
  assert.ok(history.usage.prompt_tokens > withTools.usage.prompt_tokens);
  // Force the thought-channel marker (<|channel>, id 100): everything after it is reasoning.
  const r = await client.chat.completions.create({ model: 'm', messages: user('Think'), max_tokens: 6, ...greedy, logit_bias: { 100: 100 }, chat_template_kwargs: { enable_thinking: true } });
  assert.ok(r.choices[0].message.reasoning_content.length > 0);
  assert.equal(r.choices[0].message.content, '');
  const s = await collectChat(await client.chat.completions.create({ model: 'm', messages: user('Think'), max_tokens: 6, ...greedy, logit_bias: { 100: 100 }, stream: true }));
  assert.ok(s.some((c) => c.choices[0]?.delta?.reasoning_content));
});

// tool_choice "required" / a named function: the server forces the output to open a call
// ("<|tool_call>call:NAME{") and decodes the arguments under the function's schema, so the answer
// is a tool call to an allowed function.
test('tool_choice required and named force a tool call, streaming and not', async () => {
  const tools = [
    { type: 'function', function: { name: 'get_weather', description: 'Weather for a city', parameters: { type: 'object', properties: { city: { type: 'string' } } } } },
    { type: 'function', function: { name: 'get_time', description: 'Time in a zone', parameters: { type: 'object', properties: { tz: { type: 'string' } } } } },
  ];
  const named = { type: 'function', function: { name: 'get_time' } };
  const ask = { model: 'm', messages: user('What time is it in Paris?'), max_tokens: 16, ...greedy, tools };
  const checkCall = (choice, names) => {
    assert.ok(['tool_calls', 'length'].includes(choice.finish_reason), choice.finish_reason);
    const calls = choice.message.tool_calls;
    assert.ok(calls.length >= 1);
    assert.ok(names.includes(calls[0].function.name), calls[0].function.name);
    assert.equal(calls[0].type, 'function');
    assert.equal(typeof calls[0].function.arguments, 'string');
    assert.ok(calls[0].function.arguments.startsWith('{'), calls[0].function.arguments);
  };
  for (const tool_choice of ['required', named]) {
    const names = tool_choice === 'required' ? ['get_weather', 'get_time'] : ['get_time'];
    const r = await client.chat.completions.create({ ...ask, tool_choice });
    checkCall(r.choices[0], names);
    // The forced opening counts as generated tokens.
    assert.ok(r.usage.completion_tokens >= 3);
    // Streaming: the same call (greedy), in a tool_calls delta with an index, and the same finish.
    const chunks = await collectChat(await client.chat.completions.create({ ...ask, tool_choice, stream: true }));
    const callChunk = chunks.find((c) => c.choices[0]?.delta?.tool_calls);
    assert.ok(callChunk, 'no tool_calls delta');
    assert.equal(callChunk.choices[0].delta.tool_calls[0].index, 0);
    assert.deepEqual(callChunk.choices[0].delta.tool_calls.map(({ index, ...c }) => c), r.choices[0].message.tool_calls);
    assert.equal(chunks.find((c) => c.choices[0]?.finish_reason).choices[0].finish_reason, r.choices[0].finish_reason);
  }
  // Named: only the named tool is rendered, so the prompt is shorter than with both tools.
  const both = await client.chat.completions.create({ ...ask, max_tokens: 1, tool_choice: 'auto' });
  const one = await client.chat.completions.create({ ...ask, tool_choice: named });
  assert.ok(one.usage.prompt_tokens < both.usage.prompt_tokens - 5);
  // A forced call's arguments are decoded under its schema (tests/server/tool_calls_test.mjs), so
  // pushing <|tool_response> (id 50, a stop token) cannot end the call right after the opening:
  // it ends whole (valid JSON arguments) or at max_tokens.
  const cut = await client.chat.completions.create({ ...ask, tool_choice: named, logit_bias: { 50: 100 } });
  assert.ok(['tool_calls', 'length'].includes(cut.choices[0].finish_reason), cut.choices[0].finish_reason);
  assert.equal(cut.choices[0].message.tool_calls[0].function.name, 'get_time');
  if (cut.choices[0].finish_reason === 'tool_calls') JSON.parse(cut.choices[0].message.tool_calls[0].function.arguments);
  assert.equal(cut.choices[0].message.content, null);
  // Sampling (not greedy) is constrained the same way.
  for (let seed = 0; seed < 3; ++seed) {
    const r = await client.chat.completions.create({ ...ask, temperature: 1, seed, tool_choice: 'required' });
    checkCall(r.choices[0], ['get_weather', 'get_time']);
  }
});

test('max_tokens is capped to the room left: finish_reason length', async () => {
  // A prompt of CTX - 12 token ids leaves room for 12 tokens.
  const prompt = [2, ...Array(CTX - 13).fill(1596)];
  const r = await client.completions.create({ model: 'm', prompt, max_tokens: 100000, ...greedy, ignore_eos: true });
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 12);
  assert.equal(r.usage.prompt_tokens + r.usage.completion_tokens, CTX);
});

async function expectError(promise, status, pattern, param) {
  try {
    await promise;
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIError, String(e));
    assert.equal(e.status, status, e.message);
    if (pattern) assert.match(e.message, pattern);
    if (param !== undefined) assert.equal(e.param, param);
    assert.ok(e.error && typeof e.error.message === 'string' && 'type' in e.error);
    return e;
  }
  assert.fail(`expected HTTP ${status}`);
}

test('errors: unsupported and invalid fields are 400 with an OpenAI error object', async () => {
  await expectError(client.chat.completions.create({ model: 'm', messages: user('x'), n: 2 }), 400, /'n' must be 1/, 'n');
  await expectError(client.chat.completions.create({ model: 'm', messages: user('x'), temperature: -1 }), 400, /temperature/, 'temperature');
  await expectError(client.chat.completions.create({ model: 'm', messages: user('x'), max_tokens: -5 }), 400, /max_tokens/, 'max_tokens');
  await expectError(client.chat.completions.create({ model: 'm', messages: [] }), 400, /messages/, 'messages');
  await expectError(client.chat.completions.create({ model: 'm', messages: user('x'), response_format: { type: 'xml' } }), 400, /response_format/);
  await expectError(client.chat.completions.create({ model: 'm', messages: user('x'), tool_choice: 'required' }), 400, /required/, 'tool_choice');
  await expectError(client.chat.completions.create({ model: 'm', messages: user('x'), tool_choice: { type: 'function', function: { name: 'g' } }, tools: [{ type: 'function', function: { name: 'f' } }] }), 400, /'g'.*not in 'tools'/, 'tool_choice');
  await expectError(client.chat.completions.create({ model: 'm', messages: user('x'), max_tokens: 3, tool_choice: { type: 'function', function: { name: 'f' } }, tools: [{ type: 'function', function: { name: 'f' } }] }), 400, /forced tool call needs more than/, 'max_tokens');
  await expectError(client.completions.create({ model: 'm', prompt: 'x', echo: true }), 400, /echo/);
  await expectError(client.completions.create({ model: 'm', prompt: 'x', best_of: 2 }), 400, /best_of/);
  const long = 'word '.repeat(CTX + 50);
  const e = await expectError(client.completions.create({ model: 'm', prompt: long, max_tokens: 5 }), 400, /context/);
  assert.match(e.message, new RegExp(`${CTX} tokens`));
  assert.match(e.message, /the prompt has \d+ tokens/);
  assert.equal(e.code, 'context_length_exceeded');
});

test('32 simultaneous streaming clients each get the tokens they get alone', async () => {
  const n = 32;
  const prompts = Array.from({ length: n }, (_, i) => `Client ${i} asks: ${'why '.repeat(i % 7)}is the sky blue?`);
  const request = (p) => ({ model: 'm', messages: user(p), max_tokens: 8, ...greedy, ignore_eos: true });
  const alone = [];
  for (const p of prompts) alone.push((await client.chat.completions.create(request(p))).choices[0].message.content);
  const stepsBefore = await metric(main.url, 'g4_decode_steps_total');
  const together = await Promise.all(prompts.map(async (p) => {
    const chunks = await collectChat(await client.chat.completions.create({ ...request(p), stream: true }));
    return chunks.map((c) => c.choices[0]?.delta?.content || '').join('');
  }));
  const steps = (await metric(main.url, 'g4_decode_steps_total')) - stepsBefore;
  for (let i = 0; i < n; i++) assert.equal(together[i], alone[i], `client ${i}`);
  assert.ok(steps < n * 8 / 2, `batching: ${steps} forward calls for ${n * 8} tokens`);
});

// A second server: one slot and no queue, to see 429, timeouts and disconnects.
const small = await startServer(model, ['--parallel', '1', '--max-queue', '0', '--ctx', '4096']);
const smallClient = new OpenAI({ baseURL: small.url + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 60000 });

test('queue full: 429 with an OpenAI error, while the slot is busy', async () => {
  const abort = new AbortController();
  const busy = smallClient.completions.create({ model: 'm', prompt: 'x', max_tokens: 4000, ...greedy, ignore_eos: true, stream: true }, { signal: abort.signal });
  const stream = await busy;
  const it = stream[Symbol.asyncIterator]();
  await it.next();  // it is running now
  await expectError(smallClient.completions.create({ model: 'm', prompt: 'y', max_tokens: 2 }), 429, /busy/);
  abort.abort();
  try { while (!(await it.next()).done); } catch { }
});

test('a client that disconnects frees its slot at once', async () => {
  await until('the slot to come free', async () => (await metric(small.url, 'g4_slots_busy')) === 0);
  const cancelledBefore = (await metric(small.url, 'g4_finish_total', 'cancelled')) || 0;
  // Non-streaming too: the handler watches the socket while it waits.
  const abort = new AbortController();
  const p = smallClient.completions.create({ model: 'm', prompt: 'x', max_tokens: 4000, ...greedy, ignore_eos: true }, { signal: abort.signal });
  await until('the request to run', async () => (await metric(small.url, 'g4_slots_busy')) === 1);
  abort.abort();
  await p.catch(() => { });
  await until('the slot to come free after the client left', async () => (await metric(small.url, 'g4_slots_busy')) === 0);
  assert.equal(await metric(small.url, 'g4_finish_total', 'cancelled'), cancelledBefore + 1);
  const r = await smallClient.completions.create({ model: 'm', prompt: 'x', max_tokens: 2 });
  assert.equal(r.usage.completion_tokens, 2);
});

test('per-request timeout ends with finish_reason "timeout"', async () => {
  const t0 = Date.now();
  const r = await smallClient.completions.create({ model: 'm', prompt: 'x', max_tokens: 4000, ...greedy, ignore_eos: true, timeout: 0.3 });
  assert.equal(r.choices[0].finish_reason, 'timeout');
  assert.ok(r.usage.completion_tokens < 4000);
  assert.ok(Date.now() - t0 < 5000);
});

// The tool-calling round trip through the official client on g4's own Gemma-4-format test
// templates (tests/templates), small and large variants, each served as the checkpoint's
// chat_template.jinja: a forced call comes back as tool_calls, the client sends it back with the
// tool's answer, and the template folds that answer into the model turn the reply continues.
for (const variant of ['small', 'large']) {
  const dir = mkdtempSync(path.join(tmpdir(), `g4-template-${variant}-`));
  atExit(() => rmSync(dir, { recursive: true, force: true }));
  for (const f of readdirSync(model)) symlinkSync(path.join(model, f), path.join(dir, f));
  copyFileSync(path.join(sourceDir, 'tests/templates', `gemma4_g4_${variant}.jinja`), path.join(dir, 'chat_template.jinja'));
  const server = await startServer(dir, ['--parallel', '2', '--ctx', '512']);
  const c = new OpenAI({ baseURL: server.url + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 120000 });
  const post = async (route, body) => (await fetch(server.url + route, { method: 'POST', body: JSON.stringify(body) })).json();
  const ids = async (text) => (await post('/tokenize', { content: text })).tokens;

  test(`tool-calling round trip on the ${variant}-variant template`, async () => {
    const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather now', parameters: { type: 'object', properties: {} } } }];
    const ask = { model: 'm', messages: user('Weather?'), tools };
    const prompt = (await post('/apply-template', ask)).prompt;
    assert.ok(prompt.startsWith('<bos><|turn>system\n<|tool>declaration:get_weather{description:<|"|>Weather now<|"|>}<tool|><turn|>\n'), prompt);
    assert.ok(prompt.endsWith(variant === 'large' ? '<|turn>model\n<|channel>thought\n<channel|>' : 'Weather?<turn|>\n<|turn>model\n'), prompt);
    // Forced call: the server writes "<|tool_call>call:get_weather{", one token more is "}".
    const opening = (await ids('<|tool_call>call:get_weather{')).length;
    const [brace] = await ids('}');
    const first = await c.chat.completions.create({ ...ask, ...greedy, tool_choice: 'required', max_tokens: opening + 1, logit_bias: { [brace]: 100 } });
    const call = first.choices[0].message.tool_calls?.[0];
    assert.ok(call, JSON.stringify(first));
    assert.equal(call.function.name, 'get_weather');
    assert.equal(call.function.arguments, '{}');
    const loop = [...user('Weather?'), first.choices[0].message, { role: 'tool', tool_call_id: call.id, content: '21 C' }];
    const continued = (await post('/apply-template', { ...ask, messages: loop })).prompt;
    assert.ok(continued.endsWith('<|tool_call>call:get_weather{}<tool_call|><|tool_response>response:get_weather{value:<|"|>21 C<|"|>}<tool_response|>'), continued);
    const second = await c.chat.completions.create({ ...ask, messages: loop, ...greedy, max_tokens: 3 });
    assert.equal(second.choices[0].message.role, 'assistant');
    assert.equal(second.usage.prompt_tokens, (await ids(continued)).length);
    // Thinking on: the prompt leaves the model in a thought channel, so its text is reasoning.
    const thinking = { chat_template_kwargs: { enable_thinking: true } };
    assert.ok((await post('/apply-template', { ...ask, messages: loop, ...thinking })).prompt.endsWith('<tool_response|><|channel>thought\n'));
    const [word] = await ids('weather');
    const thought = await c.chat.completions.create({ ...ask, messages: loop, ...thinking, ...greedy, max_tokens: 3, logit_bias: { [word]: 100 } });
    const piece = (await post('/detokenize', { tokens: [word] })).content;
    assert.equal(thought.choices[0].message.reasoning_content, piece.repeat(3));
    assert.equal(thought.choices[0].message.content, '');
    // A string argument the client did not encode as JSON: the template refuses it (400).
    const bad = [...user('Weather?'), { role: 'assistant', content: null, tool_calls: [{ id: 'x', type: 'function', function: { name: 'get_weather', arguments: 'not json' } }] }];
    await expectError(c.chat.completions.create({ ...ask, messages: bad, max_tokens: 2 }), 400, /must be an object/, 'messages');
  });
}

// A third server with an API key.
const keyed = await startServer(model, ['--parallel', '1', '--api-key', 'sekrit', '--ctx', '128']);

test('api key: 401 without it, 200 with it, /health open', async () => {
  const bad = new OpenAI({ baseURL: keyed.url + '/v1', apiKey: 'wrong', maxRetries: 0 });
  await expectError(bad.models.list(), 401, /API key/);
  const good = new OpenAI({ baseURL: keyed.url + '/v1', apiKey: 'sekrit', maxRetries: 0 });
  assert.equal((await good.models.list()).data.length, 1);
  const r = await good.chat.completions.create({ model: 'm', messages: user('x'), max_tokens: 2 });
  assert.ok(r.usage.completion_tokens >= 1);
  assert.equal((await fetch(keyed.url + '/health')).status, 200);
  assert.equal((await fetch(keyed.url + '/metrics')).status, 401);
});

test('unknown routes are 404 through the client', async () => {
  await expectError(client.embeddings.create({ model: 'm', input: 'x' }), 404, /unknown route/);
});

await run('openai client tests');
