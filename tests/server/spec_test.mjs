// g4 serve --spec ngram (speculative decoding inside continuous batching) gives the same greedy
// text as g4 serve without it, for 8 concurrent streams on a tiny synthetic model: streamed and
// not, cut by max_tokens, by a stop string and by the end of the turn; /metrics must show drafts
// accepted (else the comparison proves nothing); a JSON schema, a GBNF grammar, logprobs and a
// forced tool call give the same answers with drafting. Then the same with --spec draft and --spec mtp.
//   node tests/server/spec_test.mjs     (G4_BIN, G4_BINARY_DIR optional)
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { atExit, haveBinary, metric, run, skipUnless, startServer, test, testModel, g4 } from './harness.mjs';

skipUnless(haveBinary(), `no g4 binary at ${g4}`);

async function post(url, body) {
  return fetch(url + '/v1/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body) });
}
// The text and finish reason of one completion, streamed or not.
async function complete(url, body) {
  const r = await post(url, body);
  assert.equal(r.status, 200, await r.clone().text());
  if (!body.stream) {
    const j = await r.json();
    return { text: j.choices[0].text, finish: j.choices[0].finish_reason, tokens: j.usage.completion_tokens };
  }
  let text = '', finish = null, done = false;
  for (const ev of (await r.text()).split('\n\n')) {
    if (!ev.startsWith('data: ')) continue;
    if (ev === 'data: [DONE]') { done = true; continue; }
    const j = JSON.parse(ev.slice(6));
    assert.ok(!j.error, JSON.stringify(j.error));
    for (const c of j.choices || []) { text += c.text || ''; finish = c.finish_reason || finish; }
  }
  assert.ok(done, 'the stream ended without [DONE]');
  return { text, finish };
}

// Repetitive prompts, so that prompt lookup finds what the output copies.
const units = ['the red fox jumps over the lazy dog', 'one two three four five six', 'abc def abc def ghi',
  'lorem ipsum dolor sit amet', 'print(x); print(y); print(z);', 'ha ha ha he he', 'north south east west',
  'alpha beta gamma delta'];
const requests = units.map((u, i) => ({
  prompt: `${u}. ${u}. ${u}. ${u}.`, temperature: 0, max_tokens: 17 + i, stream: i % 2 === 1,
  ignore_eos: i % 4 !== 3,  // some may end their turn
}));

// Constrained and logprobs requests draft too: a JSON schema, a GBNF grammar, logprobs (equal up
// to the batched pass's float noise, measured ~1e-5 in ConstrainedSpeculation) and a forced tool
// call through the chat route.
const schema = { type: 'object', properties: { a: { type: 'string', maxLength: 20 }, n: { type: 'integer' } },
  required: ['a', 'n'], additionalProperties: false };
const constrainedBodies = [
  { prompt: `${units[0]}. ${units[0]}. ${units[0]}.`, temperature: 0, max_tokens: 40,
    response_format: { type: 'json_schema', json_schema: { name: 'p', schema } } },
  { prompt: `${units[1]}. ${units[1]}. ${units[1]}.`, temperature: 0, max_tokens: 30,
    grammar: 'root ::= "[" [a-z ]+ ("," [a-z ]+)* "]"' },
  { prompt: `${units[2]}. ${units[2]}. ${units[2]}.`, temperature: 0, max_tokens: 24, logprobs: 3, ignore_eos: true },
];
const toolChat = {
  messages: [{ role: 'user', content: 'Call the tool. Call the tool. Call the tool.' }], temperature: 0, max_tokens: 40,
  tools: [{ type: 'function', function: { name: 'lookup', parameters: schema } }],
  tool_choice: { type: 'function', function: { name: 'lookup' } },
};
async function constrainedWorkload(url) {
  const out = await Promise.all(constrainedBodies.map(async (b) => {
    const r = await post(url, b);
    assert.equal(r.status, 200, await r.clone().text());
    return (await r.json()).choices[0];
  }));
  const r = await fetch(url + '/v1/chat/completions', { method: 'POST',
    headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(toolChat) });
  assert.equal(r.status, 200, await r.clone().text());
  out.push((await r.json()).choices[0]);
  return out;
}
function assertClose(a, b, what) {
  if (typeof a === 'number' && typeof b === 'number') {
    assert.ok(Math.abs(a - b) <= 1e-4 || a === b, `${what}: ${a} vs ${b}`);
  } else if (a && typeof a === 'object') {
    assert.deepEqual(Object.keys(a).sort(), Object.keys(b || {}).sort(), what);
    for (const k of Object.keys(a)) assertClose(a[k], b[k], `${what}.${k}`);
  } else {
    assert.deepEqual(a, b, what);
  }
}

async function workload(url, stop) {
  const bodies = requests.map((b, i) => (i === 2 && stop ? { ...b, stop: [stop] } : b));
  return Promise.all(bodies.map((b) => complete(url, b)));  // 8 at once: one batch
}

test('greedy output with --spec ngram equals plain serving, 8 concurrent streams', async () => {
  const model = testModel();
  const flags = ['--parallel', '8', '--ctx', '256', '--quiet'];
  const plainServer = await startServer(model, flags);
  const plain = await workload(plainServer.url);
  // A stop string from the middle of one answer: both servers must cut there.
  const stop = plain[2].text.length > 6 ? plain[2].text.slice(3, 6) : null;
  const plainStopped = stop ? await workload(plainServer.url, stop) : plain;
  const plainConstrained = await constrainedWorkload(plainServer.url);
  plainServer.proc.kill('SIGTERM');
  await plainServer.exited;

  const specServer = await startServer(model, [...flags, '--spec', 'ngram', '--draft-max', '4']);
  const spec = await workload(specServer.url);
  const specStopped = stop ? await workload(specServer.url, stop) : spec;
  const drafted0 = await metric(specServer.url, 'g4_spec_drafted_tokens_total');
  console.log('     constrained: ' + plainConstrained.map((c) => JSON.stringify(c.text ?? c.message.tool_calls?.[0]?.function).slice(0, 60) + ' ' + c.finish_reason).join(' | '));
  const specConstrained = await constrainedWorkload(specServer.url);
  for (let i = 0; i < plainConstrained.length; i++)
    assertClose(specConstrained[i], plainConstrained[i], `constrained request ${i} with --spec ngram`);
  assert.ok(await metric(specServer.url, 'g4_spec_drafted_tokens_total') > drafted0,
    'the constrained requests drafted nothing');
  for (let i = 0; i < requests.length; i++) {
    assert.deepEqual(spec[i], plain[i], `request ${i} differs with --spec ngram`);
    assert.deepEqual(specStopped[i], plainStopped[i], `request ${i} (stop string run) differs with --spec ngram`);
  }
  const accepted = await metric(specServer.url, 'g4_spec_accepted_tokens_total');
  const proposed = await metric(specServer.url, 'g4_spec_drafted_tokens_total');
  const perPass = await metric(specServer.url, 'g4_spec_tokens_per_target_pass');
  console.log(`     drafted ${proposed}, accepted ${accepted}, ${perPass.toFixed(2)} tokens per target pass`);
  assert.ok(accepted > 0, 'no draft was accepted: the comparison proves nothing');
  assert.ok(perPass > 1, `tokens per target pass ${perPass}`);
  specServer.proc.kill('SIGTERM');
  await specServer.exited;

  // A draft model per slot (here the target itself: greedy drafts it must accept), with its own
  // KV cache per slot.
  const draftServer = await startServer(model, [...flags, '--spec', 'draft', '--draft', model, '--draft-max', '3']);
  const drafted = await workload(draftServer.url);
  for (let i = 0; i < requests.length; i++) assert.deepEqual(drafted[i], plain[i], `request ${i} differs with --spec draft`);
  const rate = await metric(draftServer.url, 'g4_spec_acceptance_rate');
  console.log(`     --spec draft (the model itself): acceptance ${rate.toFixed(3)}`);
  assert.ok(rate > 0.9, `a model drafting for itself had its drafts accepted at ${rate}`);
  draftServer.proc.kill('SIGTERM');
  await draftServer.exited;

  // Gemma-4's assistant drafter (random synthetic weights, so few drafts are accepted: the
  // scheduler_mtp ctest checks each slot's cache and hidden state exactly), every slot drafting
  // from its own cache and hidden state while 8 share each step.
  if (process.env.G4_SERVE_TEST_MODEL) return;  // the synthetic assistant fits only the synthetic target
  const assistant = mkdtempSync(path.join(tmpdir(), 'g4-serve-assistant-'));
  atExit(() => rmSync(assistant, { recursive: true, force: true }));
  execFileSync(g4, ['synth', '--preset', 'e2b-assistant', '--out', assistant], { stdio: ['ignore', 'ignore', 'inherit'] });
  const mtpServer = await startServer(model, [...flags, '--spec', 'mtp', '--draft', assistant, '--draft-max', '3']);
  const mtp = await workload(mtpServer.url);
  for (let i = 0; i < requests.length; i++) assert.deepEqual(mtp[i], plain[i], `request ${i} differs with --spec mtp`);
  const mtpDrafted = await metric(mtpServer.url, 'g4_spec_drafted_tokens_total');
  const mtpPasses = await metric(mtpServer.url, 'g4_spec_target_passes_total');
  console.log(`     --spec mtp (synthetic assistant): drafted ${mtpDrafted} in ${mtpPasses} target passes`);
  assert.ok(mtpDrafted > 0 && mtpPasses > 0, 'the assistant drafted nothing');
  // Sampled requests verify the assistant's greedy drafts by speculative sampling: they run to length.
  const sampled = await Promise.all([0.7, 1.2].map((temperature) => complete(mtpServer.url,
    { prompt: requests[0].prompt, temperature, seed: 5, max_tokens: 20, ignore_eos: true })));
  for (const r of sampled) assert.deepEqual([r.finish, r.tokens], ['length', 20]);
  mtpServer.proc.kill('SIGTERM');
  await mtpServer.exited;
});

test('--spec flags are checked before loading', async () => {
  const { spawnSync } = await import('node:child_process');
  const bad = [['--spec', 'draft'], ['--spec', 'ngram', '--draft-max', '0'], ['--draft', 'x']];
  for (const flags of bad) {
    const r = spawnSync(g4, ['serve', '--model', '/nonexistent', '--port', '0', ...flags], { encoding: 'utf8' });
    assert.equal(r.status, 2, `${flags.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, /--spec|--draft/);
  }
});

await run('g4 serve --spec');
