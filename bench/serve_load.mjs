// Load benchmark for g4 serve: for each --parallel N in the list, starts a server, keeps N
// streaming /v1/completions requests in flight (closed loop) until `requests` are done, and
// reports requests/s, aggregate generated tokens/s, mean TTFT and per-stream decode tokens/s.
//   node bench/serve_load.mjs [--model DIR] [--quant bf16|q8|q4] [--slots 1,4,16] [--requests N|N1,N2,..]
//                             [--max-tokens 64] [--prompt-tokens 32] [--threads 0]
//                             [--spec ngram|draft [--draft MODEL] [--draft-max N] [--ngram-min A] [--draft-adaptive]]
//                             [--repetitive 1]
// --spec: the server decodes speculatively (docs/speculative.md); the table then adds tokens per
// target pass and the acceptance rate from /metrics. --repetitive 1: text prompts that repeat a
// passage (distinct per request), the prompt-lookup case, instead of random token ids.
// --requests: one count for every slot count, or one per slot count; default max(2 * slots, 8). Without --model it benchmarks a tiny
// synthetic E2B (g4 synth). Never run by ctest.
import { rmSync } from 'node:fs';
import { metric, startServer, testModel, waitHealthy } from '../tests/server/harness.mjs';

const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => {
  if (a.startsWith('--')) acc.push([a.slice(2), all[i + 1]]);
  return acc;
}, []));
const model = args.model || testModel();
const slotsList = (args.slots || '1,4,16').split(',').map(Number);
const maxTokens = Number(args['max-tokens'] || 64);
const promptTokens = Number(args['prompt-tokens'] || 32);
const threads = args.threads || '0';
const quant = args.quant || 'bf16';
const specFlags = args.spec ? ['--spec', args.spec, ...(args.draft ? ['--draft', args.draft] : []),
  ...(args['draft-max'] ? ['--draft-max', args['draft-max']] : []),
  ...(args['ngram-min'] ? ['--ngram-min', args['ngram-min']] : []),
  ...(process.argv.includes('--draft-adaptive') ? ['--draft-adaptive'] : [])] : [];
const repetitive = args.repetitive === '1';
const passages = ['The quick brown fox jumps over the lazy dog while the farmer watches from the barn.',
  'Once upon a time there was a little girl who lived in a village near the forest.',
  'The meeting is scheduled for Monday at ten in the morning in the main conference room.',
  'To install the package, run the setup script and then restart the server twice.'];
// A passage said three times, numbered so that prompts differ (no request reuses another's cache).
function repetitivePrompt(i) {
  const p = passages[((i % passages.length) + passages.length) % passages.length];
  return `Note ${i}: ${p}\nNote ${i}: ${p}\nNote ${i}: ${p}\nNote ${i}:`;
}

async function one(url, i) {
  const t0 = performance.now();
  // Distinct prompts (token ids), so no request reuses another's cache.
  const prompt = repetitive ? repetitivePrompt(i) : [2, ...Array.from({ length: promptTokens - 1 }, (_, k) => 1000 + ((i * 7919 + k * 104729) % 200000))];
  const res = await fetch(url + '/v1/completions', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens: maxTokens, temperature: 0, ignore_eos: true, stream: true,
      stream_options: { include_usage: true } }),
  });
  const reader = res.body.getReader();
  let ttft = 0, tokens = 0, buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    if (!ttft) ttft = performance.now() - t0;
    buf += new TextDecoder().decode(value);
    const m = /"completion_tokens":(\d+)/.exec(buf);
    if (m) tokens = Number(m[1]);
  }
  const total = performance.now() - t0;
  return { ttft, tokens, total };
}

async function specCounters(url) {
  const get = async (name) => (await metric(url, name)) || 0;
  return { passes: await get('g4_spec_target_passes_total'), tokens: await get('g4_spec_tokens_total'),
    drafted: await get('g4_spec_drafted_tokens_total'), accepted: await get('g4_spec_accepted_tokens_total') };
}

console.log(`model ${model} (${quant}); prompt ${repetitive ? 'a repeated passage' : promptTokens + ' tokens'}, ${maxTokens} generated per request${specFlags.length ? '; ' + specFlags.join(' ') : ''}`);
// aggregate tok/s: all completion tokens over the wall time (prefill included). decode tok/s:
// one stream's rate after its first token; x slots: what the slots decode together (the batched
// throughput once prefill is done). tok/step: tokens per engine step (~slots when batching).
console.log('| slots | requests | wall s | requests/s | aggregate tok/s | mean TTFT ms | per-stream decode tok/s | decode tok/s x slots | tok/step |' +
  (specFlags.length ? ' tok/target pass | acceptance |' : ''));
console.log('|---:|---:|---:|---:|---:|---:|---:|---:|---:|' + (specFlags.length ? '---:|---:|' : ''));
for (const slots of slotsList) {
  // --requests N, or a list matching --slots (e.g. 2,4,16), else max(2 * slots, 8).
  const requestList = args.requests ? String(args.requests).split(',').map(Number) : [];
  const requests = requestList.length > 1 ? requestList[slotsList.indexOf(slots)] : requestList[0] || Math.max(2 * slots, 8);
  const server = await startServer(model, ['--parallel', String(slots), '--threads', threads, '--quiet', '--quant', quant,
    '--ctx', String((repetitive ? 128 : promptTokens) + maxTokens + 8), '--max-queue', String(requests), ...specFlags],
    { waitReady: false });
  const loadStart = performance.now();
  await waitHealthy(server.url, 30 * 60 * 1000);  // a full-size model converting to q4 takes minutes here
  console.error(`  --parallel ${slots}: ready in ${((performance.now() - loadStart) / 1000).toFixed(1)} s`);
  await one(server.url, -1);  // warm-up
  const stepsBefore = await metric(server.url, 'g4_decode_steps_total');
  const specBefore = await specCounters(server.url);
  let next = 0;
  const results = [];
  const t0 = performance.now();
  await Promise.all(Array.from({ length: slots }, async () => {
    while (next < requests) results.push(await one(server.url, next++));
  }));
  const wall = (performance.now() - t0) / 1000;
  const tokens = results.reduce((a, r) => a + r.tokens, 0);
  const ttft = results.reduce((a, r) => a + r.ttft, 0) / results.length;
  const steps = (await metric(server.url, 'g4_decode_steps_total')) - stepsBefore;
  // Token-weighted: decode tokens over decode seconds, summed over requests.
  const perStream = results.reduce((a, r) => a + r.tokens - 1, 0) / results.reduce((a, r) => a + (r.total - r.ttft) / 1000, 0);
  const spec = await specCounters(server.url);
  const specCols = specFlags.length
    ? ` ${((spec.tokens - specBefore.tokens) / Math.max(1, spec.passes - specBefore.passes)).toFixed(2)} |` +
      ` ${((spec.accepted - specBefore.accepted) / Math.max(1, spec.drafted - specBefore.drafted)).toFixed(2)} |` : '';
  console.log(`| ${slots} | ${requests} | ${wall.toFixed(1)} | ${(requests / wall).toFixed(2)} | ${(tokens / wall).toFixed(1)} | ${ttft.toFixed(0)} | ${perStream.toFixed(2)} | ${(perStream * slots).toFixed(1)} | ${(tokens / steps).toFixed(1)} |${specCols}`);
  server.proc.kill('SIGTERM');
  await server.exited;
}
if (!args.model) rmSync(model, { recursive: true, force: true });  // the synthetic one made above
process.exit(0);
