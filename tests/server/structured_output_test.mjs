// Structured outputs through the official `openai` npm client against `g4 serve`: a generated
// corpus of JSON schemas, each asked for greedy and sampled, streamed and not, on chat and
// completions; every output that finishes with "stop" must parse and validate with ajv (an
// independent JSON-schema validator, with ajv-formats for date / email / uuid ...). Also: json_object,
// a GBNF `grammar`, unsupported keywords (400 naming them), and a schema that cannot be met within
// max_tokens (finish_reason "length", never a truncated output claimed complete).
//   node tests/server/structured_output_test.mjs
// ajv and ajv-formats come from assets/npm (tools/setup.sh), else from $G4_AJV_MODULES (a
// node_modules directory holding both).
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { assets, haveBinary, run, skipUnless, startServer, test, testModel, g4 } from './harness.mjs';

const clientPath = path.join(assets, 'npm/node_modules/openai/package.json');
skipUnless(existsSync(clientPath), `the openai npm package is not installed (${clientPath}); run tools/setup.sh`);
skipUnless(haveBinary(), `no g4 binary at ${g4}`);
const ajvDir = [path.join(assets, 'npm/node_modules'), process.env.G4_AJV_MODULES || '']
  .find((d) => d && existsSync(path.join(d, 'ajv/package.json')) && existsSync(path.join(d, 'ajv-formats/package.json')));
skipUnless(ajvDir, 'ajv and ajv-formats are not installed (assets/npm or $G4_AJV_MODULES); run tools/setup.sh');
const OpenAI = createRequire(clientPath)('openai');
const requireAjv = createRequire(path.join(ajvDir, 'ajv/package.json'));
const Ajv = requireAjv('ajv').default;
const addFormats = createRequire(path.join(ajvDir, 'ajv-formats/package.json'))('ajv-formats').default;

const model = testModel();
const server = await startServer(model, ['--parallel', '4', '--ctx', '1024']);
const client = new OpenAI({ baseURL: server.url + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 300000 });
const user = (content) => [{ role: 'user', content }];

// --- A seeded generator of schemas (bounded, so that even random weights end within max_tokens) --
function rng(seed) {
  let x = seed >>> 0 || 1;
  return () => ((x = (x * 1664525 + 1013904223) >>> 0) / 4294967296);
}
function makeSchema(rand, depth = 0) {
  const pick = (a) => a[Math.floor(rand() * a.length)];
  const leaf = () => pick([
    () => ({ type: 'string', maxLength: 1 + Math.floor(rand() * 6) }),
    () => ({ type: 'string', minLength: 1, maxLength: 3 }),
    () => ({ type: 'string', format: pick(['date', 'time', 'date-time', 'uuid', 'email']) }),
    () => ({ type: 'integer' }),
    () => ({ type: 'integer', minimum: -20 + Math.floor(rand() * 20), maximum: Math.floor(rand() * 500) }),
    () => ({ type: 'number' }),
    () => ({ type: 'boolean' }),
    () => ({ type: 'null' }),
    () => ({ enum: ['red', 'green', 'blue', 7, null] }),
    () => ({ const: 'fixed' }),
    () => ({ type: ['integer', 'null'] }),
  ])();
  if (depth >= 2) return leaf();
  const kind = rand();
  if (kind < 0.45) {
    const properties = {};
    const required = [];
    const n = 1 + Math.floor(rand() * 4);
    for (let i = 0; i < n; i++) {
      const name = pick(['id', 'name', 'when', 'tags', 'value', 'ok', 'x_y', 'Größe']) + i;
      properties[name] = makeSchema(rand, depth + 1);
      if (rand() < 0.6) required.push(name);
    }
    return { type: 'object', properties, required, additionalProperties: false };
  }
  if (kind < 0.65) {
    const min = Math.floor(rand() * 2);
    return { type: 'array', items: makeSchema(rand, depth + 1), minItems: min, maxItems: min + 1 + Math.floor(rand() * 2) };
  }
  if (kind < 0.75) return { anyOf: [makeSchema(rand, depth + 1), makeSchema(rand, depth + 1)] };
  return leaf();
}
const corpus = [];
for (let i = 0; i < 14; i++) {
  const rand = rng(1000 + i);
  corpus.push({ type: 'object', properties: { answer: makeSchema(rand), extra: makeSchema(rand) }, required: ['answer'],
                additionalProperties: false });
}
// Recursion through $defs, and a plain nested object.
corpus.push({ $defs: { node: { type: 'object', properties: { v: { type: 'integer', minimum: 0, maximum: 9 },
  kids: { type: 'array', items: { $ref: '#/$defs/node' }, maxItems: 2 } }, required: ['v'], additionalProperties: false } },
  $ref: '#/$defs/node' });
corpus.push({ type: 'object', properties: { person: { type: 'object', properties: { first: { type: 'string', maxLength: 5 },
  born: { type: 'string', format: 'date' } }, required: ['first', 'born'], additionalProperties: false } }, required: ['person'],
  additionalProperties: false });

const ajv = new Ajv({ strict: false, allErrors: true });
addFormats(ajv);
const stats = { stop: 0, length: 0, checked: 0 };

function checkOutput(schema, text, finish, what) {
  if (finish === 'length') { stats.length++; return; }
  assert.equal(finish, 'stop', what);
  let value;
  try { value = JSON.parse(text); } catch (e) { assert.fail(`${what}: not JSON: ${JSON.stringify(text)}`); }
  const validate = ajv.compile(schema);
  assert.ok(validate(value), `${what}: ${JSON.stringify(text)} does not validate: ${ajv.errorsText(validate.errors)}\nschema ${JSON.stringify(schema)}`);
  stats.stop++;
  stats.checked++;
}

// Under sanitizers (10x slower) every third schema is enough to exercise each path.
const stride = process.env.G4_SANITIZED ? 3 : 1;

const format = (schema) => ({ type: 'json_schema', json_schema: { name: 'out', schema, strict: true } });

test('generated schemas: chat, greedy and sampled, streamed and not, validate with ajv', async () => {
  let asked = 0;
  for (let i = 0; i < corpus.length; i += stride) {
    const schema = corpus[i];
    asked += 2;
    const base = { model: 'm', messages: user('Reply in JSON.'), max_tokens: 400, response_format: format(schema) };
    const greedy = await client.chat.completions.create({ ...base, temperature: 0 });
    checkOutput(schema, greedy.choices[0].message.content, greedy.choices[0].finish_reason, `schema ${i} greedy`);
    const stream = await client.chat.completions.create({ ...base, temperature: 1, seed: i, stream: true });
    let text = '', finish = null;
    for await (const c of stream) {
      text += c.choices[0]?.delta?.content ?? '';
      finish = c.choices[0]?.finish_reason ?? finish;
    }
    checkOutput(schema, text, finish, `schema ${i} sampled, streamed`);
  }
  assert.ok(stats.stop >= asked / 2, `only ${stats.stop} of ${asked} outputs finished`);
});

test('completions take response_format too', async () => {
  for (let i = 0; i < 4; i++) {
    const r = await client.completions.create({ model: 'm', prompt: 'JSON:', max_tokens: 400, temperature: 0.8, seed: i,
                                                response_format: format(corpus[i]) });
    checkOutput(corpus[i], r.choices[0].text, r.choices[0].finish_reason, `completion ${i}`);
  }
});

test('json_object gives a JSON object', async () => {
  const r = await client.chat.completions.create({ model: 'm', messages: user('JSON please'), max_tokens: 300,
                                                   temperature: 0, response_format: { type: 'json_object' } });
  if (r.choices[0].finish_reason === 'stop') {
    const v = JSON.parse(r.choices[0].message.content);
    assert.equal(typeof v, 'object');
    assert.ok(!Array.isArray(v) && v !== null);
  } else {
    assert.equal(r.choices[0].finish_reason, 'length');
  }
});

test('a GBNF grammar constrains the completion', async () => {
  const grammar = 'root ::= ("yes" | "no") "," [0-9]{2}\n';
  for (let seed = 0; seed < 3; seed++) {
    const r = await client.completions.create({ model: 'm', prompt: 'Answer:', max_tokens: 20, temperature: 1, seed, grammar });
    assert.equal(r.choices[0].finish_reason, 'stop');
    assert.match(r.choices[0].text, /^(yes|no),[0-9]{2}$/);
  }
});

test('a schema that cannot be met within max_tokens ends with "length"', async () => {
  const schema = { type: 'array', items: { type: 'integer', minimum: 100, maximum: 999 }, minItems: 40 };
  const r = await client.chat.completions.create({ model: 'm', messages: user('numbers'), max_tokens: 12,
                                                   temperature: 0, response_format: format(schema) });
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 12);
  assert.throws(() => { const v = JSON.parse(r.choices[0].message.content); if (!ajv.validate(schema, v)) throw new Error(); });
});

test('unsupported schema keywords and bad grammars are 400s naming them', async () => {
  const bad = { type: 'object', properties: { s: { type: 'string', pattern: '^a+$' } } };
  await assert.rejects(
    client.chat.completions.create({ model: 'm', messages: user('x'), response_format: format(bad) }),
    (e) => e.status === 400 && /pattern/.test(e.message) && e.param === 'response_format');
  await assert.rejects(
    client.completions.create({ model: 'm', prompt: 'x', grammar: 'root ::= "a"\nroot ::= "b"\n' }),
    (e) => e.status === 400 && /line 2, column 1: rule 'root' is defined twice/.test(e.message) && e.param === 'grammar');
  // 300000 optional items: every one is a possible first byte, too wide for the recogniser.
  await assert.rejects(
    client.completions.create({ model: 'm', prompt: 'x', grammar: 'root ::= (("a"?){10000}){30} "b"\n' }),
    (e) => e.status === 400 && /too ambiguous or too wide to follow/.test(e.message) && e.param === 'grammar');
});

const defaultModel = path.join(assets, 'models/default');
test('the default (trained) model: schema outputs validate', async () => {
  if (!existsSync(path.join(defaultModel, 'config.json'))) { console.log('     (no default model; skipped)'); return; }
  const trained = await startServer(defaultModel, ['--parallel', '2', '--ctx', '1024']);
  const c = new OpenAI({ baseURL: trained.url + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 300000 });
  for (let i = 0; i < corpus.length; i += 3 * stride) {
    for (const temperature of [0, 1]) {
      const r = await c.chat.completions.create({ model: 'm', messages: user('Give the data as JSON.'), max_tokens: 300,
                                                  temperature, seed: i, response_format: format(corpus[i]) });
      checkOutput(corpus[i], r.choices[0].message.content, r.choices[0].finish_reason, `default model, schema ${i}, t=${temperature}`);
    }
  }
});

test('summary', async () => {
  console.log(`     ${stats.checked} outputs validated by ajv, ${stats.length} ended by max_tokens`);
});

await run('structured outputs');
