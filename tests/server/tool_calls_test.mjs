// Strict and forced tool calls through the official `openai` npm client against `g4 serve` on a
// random-weight model: with `strict: true` or a forcing `tool_choice`, the call is decoded under
// a grammar of Gemma-4's call syntax built from the function's `parameters`, so every call that
// comes back with finish_reason "tool_calls" has `arguments` that JSON.parse and validate with
// ajv (an independent JSON-schema validator): nested objects, enums, bounded integers, arrays,
// required properties; chat streamed and not, parallel_tool_calls true / false, /v1/responses
// function tools. A call cut by max_tokens ends with "length". Kept small: CI also runs it under
// TSan.
//   node tests/server/tool_calls_test.mjs
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { assets, haveBinary, run, skipUnless, startServer, test, testModel, g4 } from './harness.mjs';

const clientPath = path.join(assets, 'npm/node_modules/openai/package.json');
skipUnless(existsSync(clientPath), `the openai npm package is not installed (${clientPath}); run tools/setup.sh`);
skipUnless(haveBinary(), `no g4 binary at ${g4}`);
const ajvDir = [path.join(assets, 'npm/node_modules'), process.env.G4_AJV_MODULES || '']
  .find((d) => d && existsSync(path.join(d, 'ajv/package.json')));
skipUnless(ajvDir, 'ajv is not installed (assets/npm or $G4_AJV_MODULES); run tools/setup.sh');
const OpenAI = createRequire(clientPath)('openai');
const Ajv = createRequire(path.join(ajvDir, 'ajv/package.json'))('ajv').default;

const server = await startServer(testModel(), ['--parallel', '2', '--ctx', '1024']);
const client = new OpenAI({ baseURL: server.url + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 300000 });
const ajv = new Ajv({ strict: false, allErrors: true });
const user = (content) => [{ role: 'user', content }];

// Bounded schemas, so that even random weights end a call well within max_tokens.
const schemas = {
  get_weather: {
    type: 'object',
    properties: { city: { type: 'string', maxLength: 6 }, unit: { enum: ['celsius', 'fahrenheit'] },
                  days: { type: 'integer', minimum: 1, maximum: 14 } },
    required: ['city', 'days'], additionalProperties: false,
  },
  update_user: {
    type: 'object',
    properties: {
      user: { type: 'object', properties: { name: { type: 'string', maxLength: 4 }, admin: { type: 'boolean' },
                                            tags: { type: 'array', items: { enum: ['a', 'b', 'c'] }, maxItems: 3 } },
              required: ['name', 'admin'], additionalProperties: false },
      ids: { type: 'array', items: { type: 'integer', minimum: 0, maximum: 99 }, minItems: 1, maxItems: 3 },
    },
    required: ['user', 'ids'], additionalProperties: false,
  },
};
const chatTools = (strict) => Object.entries(schemas).map(([name, parameters]) =>
  ({ type: 'function', function: { name, description: `The ${name} tool`, parameters, ...(strict ? { strict: true } : {}) } }));
const validators = Object.fromEntries(Object.entries(schemas).map(([n, s]) => [n, ajv.compile(s)]));
const stats = { calls: 0, maxPerAnswer: 0, length: 0 };

// Every call: a known function, arguments that parse and validate. The schemas are bounded, so a
// single call always ends within max_tokens (length is allowed only where several calls may come).
function checkCalls(calls, finish, names, what, { mayRunOut = false } = {}) {
  if (finish === 'length' && mayRunOut) { stats.length++; return; }
  assert.equal(finish, 'tool_calls', what);
  assert.ok(calls.length >= 1, what);
  stats.maxPerAnswer = Math.max(stats.maxPerAnswer, calls.length);
  for (const c of calls) {
    assert.ok(names.includes(c.name), `${what}: ${c.name}`);
    let args;
    try { args = JSON.parse(c.arguments); } catch { assert.fail(`${what}: arguments are not JSON: ${c.arguments}`); }
    assert.ok(validators[c.name](args), `${what}: ${c.arguments}: ${ajv.errorsText(validators[c.name].errors)}`);
    stats.calls++;
  }
}

async function streamedChat(body) {
  const calls = [];
  let finish = null, content = '';
  for await (const chunk of await client.chat.completions.create({ ...body, stream: true })) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    content += choice.delta?.content ?? '';
    for (const d of choice.delta?.tool_calls ?? []) {
      calls[d.index] ??= { name: '', arguments: '' };
      calls[d.index].name += d.function?.name ?? '';
      calls[d.index].arguments += d.function?.arguments ?? '';
    }
    finish = choice.finish_reason ?? finish;
  }
  return { calls, finish, content };
}
const wholeCalls = (r) => (r.choices[0].message.tool_calls ?? []).map((c) => c.function);

test('forced calls (required, named), greedy and sampled, streamed and not, validate', async () => {
  const base = { model: 'm', messages: user('Do it.'), max_tokens: 120, tools: chatTools(false) };
  const named = { type: 'function', function: { name: 'update_user' } };
  for (const [tool_choice, names] of [['required', ['get_weather', 'update_user']], [named, ['update_user']]]) {
    for (const [i, sampling] of [{ temperature: 0 }, { temperature: 1, seed: 3 }].entries()) {
      const r = await client.chat.completions.create({ ...base, ...sampling, tool_choice });
      checkCalls(wholeCalls(r), r.choices[0].finish_reason, names, `${JSON.stringify(tool_choice)} ${i}`);
      assert.equal(r.choices[0].message.content, null);
      const s = await streamedChat({ ...base, ...sampling, tool_choice });
      checkCalls(s.calls, s.finish, names, `${JSON.stringify(tool_choice)} ${i} streamed`);
      assert.equal(s.content, '');
      if (sampling.temperature === 0) assert.deepEqual(s.calls, wholeCalls(r));  // same greedy call either way
    }
  }
});

test('parallel_tool_calls: false gives one call; true may give several', async () => {
  const base = { model: 'm', messages: user('Do it.'), max_tokens: 160, tools: chatTools(true), tool_choice: 'required' };
  for (let seed = 0; seed < 3; seed++) {
    const one = await client.chat.completions.create({ ...base, temperature: 1, seed, parallel_tool_calls: false });
    checkCalls(wholeCalls(one), one.choices[0].finish_reason, Object.keys(schemas), `parallel false ${seed}`);
    assert.ok(wholeCalls(one).length <= 1);
    const many = await streamedChat({ ...base, temperature: 1, seed, parallel_tool_calls: true });
    checkCalls(many.calls, many.finish, Object.keys(schemas), `parallel true ${seed}`, { mayRunOut: true });
  }
});

test('parallel_tool_calls with <|tool_call> pushed by logit_bias: true repeats calls, false stops after one', async () => {
  const [open] = (await (await fetch(server.url + '/tokenize', { method: 'POST', body: JSON.stringify({ content: '<|tool_call>' }) })).json()).tokens;
  const base = { model: 'm', messages: user('Do it.'), max_tokens: 90, temperature: 0, tools: chatTools(true),
                 tool_choice: { type: 'function', function: { name: 'get_weather' } }, logit_bias: { [open]: 100 } };
  const one = await client.chat.completions.create({ ...base, parallel_tool_calls: false });
  checkCalls(wholeCalls(one), one.choices[0].finish_reason, ['get_weather'], 'pushed, parallel false');
  assert.equal(one.choices[0].finish_reason, 'tool_calls');
  assert.equal(wholeCalls(one).length, 1);
  const many = await client.chat.completions.create({ ...base, parallel_tool_calls: true });
  const calls = wholeCalls(many);
  assert.ok(calls.length >= 2, JSON.stringify(many.choices[0]));
  // Every call but a last one cut by max_tokens is whole.
  const whole = many.choices[0].finish_reason === 'length' ? calls.slice(0, -1) : calls;
  checkCalls(whole, 'tool_calls', ['get_weather'], 'pushed, parallel true');
});

test('strict tools under tool_choice auto: any call the model makes validates', async () => {
  for (let seed = 0; seed < 2; seed++) {
    const r = await client.chat.completions.create({ model: 'm', messages: user('Maybe call.'), max_tokens: 24,
                                                     temperature: 1, seed, tools: chatTools(true) });
    const choice = r.choices[0];
    if (choice.finish_reason === 'tool_calls') checkCalls(wholeCalls(r), 'tool_calls', Object.keys(schemas), `auto ${seed}`);
    else assert.ok(['stop', 'length'].includes(choice.finish_reason), choice.finish_reason);
    // Free text under the strict grammar never spells a protocol marker.
    assert.doesNotMatch(choice.message.content ?? '', /<\||\|>/);
  }
});

test('a call cut by max_tokens ends with "length"', async () => {
  const r = await client.chat.completions.create({ model: 'm', messages: user('x'), max_tokens: 10, temperature: 0,
                                                   tools: chatTools(true), tool_choice: { type: 'function', function: { name: 'update_user' } } });
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 10);
});

test('/v1/responses: strict and forced function tools give valid function_call items', async () => {
  const tools = Object.entries(schemas).map(([name, parameters]) => ({ type: 'function', name, parameters, strict: true }));
  const r = await client.responses.create({ model: 'm', input: 'Do it.', tools, tool_choice: 'required', max_output_tokens: 120,
                                            temperature: 0, parallel_tool_calls: false });
  const calls = r.output.filter((o) => o.type === 'function_call');
  checkCalls(calls, r.status === 'completed' ? 'tool_calls' : 'length', Object.keys(schemas), 'responses');
  assert.ok(calls.length <= 1);
  let done = null;
  for await (const e of await client.responses.create({ model: 'm', input: 'Do it.', tools, max_output_tokens: 120, temperature: 1,
                                                        seed: 5, tool_choice: { type: 'function', name: 'get_weather' }, stream: true }))
    if (e.type === 'response.completed' || e.type === 'response.incomplete') done = e.response;
  checkCalls(done.output.filter((o) => o.type === 'function_call'), done.status === 'completed' ? 'tool_calls' : 'length',
             ['get_weather'], 'responses streamed');
});

test('a strict schema the compiler cannot take is a 400 naming the keyword', async () => {
  const tools = [{ type: 'function', function: { name: 'f', strict: true, parameters: { type: 'object', properties: { s: { type: 'string', pattern: 'a+' } } } } }];
  await assert.rejects(client.chat.completions.create({ model: 'm', messages: user('x'), tools }),
                       (e) => e.status === 400 && /pattern/.test(e.message) && /'f'/.test(e.message) && e.param === 'tools');
});

test('summary', async () => {
  console.log(`     ${stats.calls} calls validated by ajv (at most ${stats.maxPerAnswer} in one answer), ${stats.length} cut by max_tokens`);
  assert.ok(stats.calls >= 8, `only ${stats.calls} calls finished`);
});

await run('strict and forced tool calls');
