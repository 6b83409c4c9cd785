// Load benchmark for g4 serve: for each --slots N in the list, starts a server, keeps N
// streaming /v1/completions requests in flight (closed loop) until `requests` are done, and
// reports requests/s, aggregate generated tokens/s, mean and p95 TTFT, per-stream decode tokens/s
// and the server's peak RSS.
//   node bench/serve_load.mjs [--model DIR|ARTIFACT] [--quant bf16|q8|q4] [--slots 1,4,16] [--requests N|N1,N2,..]
//                             [--max-tokens 64] [--prompt-tokens 32] [--threads 0]
//                             [--spec ngram|draft [--draft MODEL] [--draft-max N] [--ngram-min A] [--draft-adaptive]]
//                             [--repetitive 1]
//                             [--llama-server BIN --gguf FILE [--llama-flags "..."]] [--long-prompt L]
// --spec: the server decodes speculatively (docs/speculative.md); the table then adds tokens per
// target pass and the acceptance rate from /metrics. --repetitive 1: text prompts that repeat a
// passage (distinct per request), the prompt-lookup case, instead of random token ids.
// --requests: one count for every slot count, or one per slot count; default max(2 * slots, 8).
// --llama-server: llama.cpp's server on the same-shaped model in GGUF, run beside g4 for each slot
// count (`--parallel N --cont-batching`, weights read into memory, same threads, same requests),
// the two engines alternating which goes first; a last table gives g4 over llama-server.
// --long-prompt L: one more client, beside the N, sends L-token prompts (8 tokens generated) back
// to back while the N run, on a slot of its own: what a long prompt's prefill does to the short
// requests' TTFT and decode rate. The table's figures stay the short requests'; a column adds the
// long prompts' mean TTFT and how many finished.
// Without --model it benchmarks a tiny synthetic E2B (g4 synth). Never run by ctest.
import { spawn } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
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
if (args['llama-server'] && !args.gguf) {
  console.error('serve_load: --llama-server needs --gguf FILE (the same model in GGUF)');
  process.exit(2);
}
const longPrompt = Number(args['long-prompt'] || 0);
const longMaxTokens = 8;
const perSlotContext = Math.max((repetitive ? 128 : promptTokens) + maxTokens, longPrompt + longMaxTokens) + 8;
const passages = ['The quick brown fox jumps over the lazy dog while the farmer watches from the barn.',
  'Once upon a time there was a little girl who lived in a village near the forest.',
  'The meeting is scheduled for Monday at ten in the morning in the main conference room.',
  'To install the package, run the setup script and then restart the server twice.'];
// A passage said three times, numbered so that prompts differ (no request reuses another's cache).
function repetitivePrompt(i) {
  const p = passages[((i % passages.length) + passages.length) % passages.length];
  return `Note ${i}: ${p}\nNote ${i}: ${p}\nNote ${i}: ${p}\nNote ${i}:`;
}

// One streaming request. TTFT: until the first event that carries text (a token), so a server
// that sends headers or an empty first event early is not credited for it. Tokens: the usage
// the server reports at the end, else the events that carried text.
let resent = 0;  // requests sent again after a closed kept-alive connection (one())
async function one(url, i, { length = promptTokens, generate = maxTokens, text = repetitive, signal } = {}) {
  const t0 = performance.now();
  // Distinct prompts (token ids), so no request reuses another's cache.
  const prompt = text ? repetitivePrompt(i)
    : [2, ...Array.from({ length: length - 1 }, (_, k) => 1000 + ((i * 7919 + k * 104729) % 200000))];
  const request = () => fetch(url + '/v1/completions', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens: generate, temperature: 0, ignore_eos: true, stream: true,
      stream_options: { include_usage: true } }),
    signal,
  });
  // A kept-alive connection the server closed as the request went out (llama-server did, now and
  // then, between requests) is sent again, counted, from the same t0: up to 3 times, as the next
  // pooled connection may have been closed as well. A server that closes every try stops the run
  // (llama-server once did, E4B at 16 slots).
  let res;
  for (let attempt = 0; ; ++attempt) {
    try {
      res = await request();
      break;
    } catch (e) {
      if (attempt === 3 || signal?.aborted || e.cause?.code !== 'UND_ERR_SOCKET') throw e;
      ++resent;
    }
  }
  if (res.status !== 200) throw new Error(`request ${i}: HTTP ${res.status}: ${await res.text()}`);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let ttft = 0, usageTokens = 0, textEvents = 0, pending = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    pending += decoder.decode(value, { stream: true });
    const lines = pending.split('\n');
    pending = lines.pop();
    for (const line of lines) {
      if (!line.startsWith('data:')) continue;
      const data = line.slice(5).trim();
      if (data === '[DONE]') continue;
      const event = JSON.parse(data);
      if (event.usage && event.usage.completion_tokens) usageTokens = event.usage.completion_tokens;
      if (event.choices && event.choices.some((c) => c.text)) {
        textEvents++;
        if (!ttft) ttft = performance.now() - t0;
      }
    }
  }
  const total = performance.now() - t0;
  return { ttft, tokens: usageTokens || textEvents, total };
}

async function specCounters(url) {
  const get = async (name) => (await metric(url, name)) || 0;
  return { passes: await get('g4_spec_target_passes_total'), tokens: await get('g4_spec_tokens_total'),
    drafted: await get('g4_spec_drafted_tokens_total'), accepted: await get('g4_spec_accepted_tokens_total') };
}

// The most memory the process held (VmHWM), in GiB; read before it is stopped.
function peakRssGiB(pid) {
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / (1024 * 1024) : NaN;
}

function freePort() {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

const engines = [{
  name: 'g4',
  async start(slots, requests) {
    const server = await startServer(model, ['--parallel', String(slots), '--threads', threads, '--quiet', '--quant', quant,
      '--ctx', String(perSlotContext), '--max-queue', String(requests), ...specFlags], { waitReady: false });
    return { url: server.url, pid: server.proc.pid, stop: async () => { server.proc.kill('SIGTERM'); await server.exited; } };
  },
  steps: (url) => metric(url, 'g4_decode_steps_total'),
}];
if (args['llama-server']) {
  engines.push({
    name: 'llama-server',
    async start(slots) {
      const port = await freePort();
      // -c is the context of all slots together; --load-mode none: weights read into memory, as g4 does
      // (mapped weights get paged out on these VMs).
      const flags = ['-m', args.gguf, '--host', '127.0.0.1', '--port', String(port), '-t', String(threads === '0' ? 2 : threads),
        '--parallel', String(slots), '--cont-batching', '-c', String(slots * perSlotContext), '--load-mode', 'none',
        ...(args['llama-flags'] ? args['llama-flags'].split(' ').filter(Boolean) : [])];
      const proc = spawn(args['llama-server'], flags, { stdio: ['ignore', 'ignore', 'ignore'] });
      const exited = new Promise((resolve) => proc.on('exit', resolve));
      return { url: `http://127.0.0.1:${port}`, pid: proc.pid, stop: async () => { proc.kill('SIGTERM'); await exited; } };
    },
    steps: async () => NaN,
  });
}

async function measure(engine, slots, requests) {
  const server = await engine.start(slots + (longPrompt ? 1 : 0), requests + 1);
  const resentBefore = resent;
  const loadStart = performance.now();
  await waitHealthy(server.url, 30 * 60 * 1000);  // a full-size model converting to q4 takes minutes here
  console.error(`  ${engine.name} --parallel ${slots}: ready in ${((performance.now() - loadStart) / 1000).toFixed(1)} s`);
  await one(server.url, 1000000);  // warm-up, with a prompt no measured request shares
  const stepsBefore = await engine.steps(server.url);
  const specBefore = engine.name === 'g4' ? await specCounters(server.url) : null;
  let next = 0;
  const results = [];
  const longResults = [];
  const stopLong = new AbortController();
  // The long prompts, back to back until the short requests are done; the one in flight then is
  // abandoned (its prefill would otherwise run on alone).
  const longClient = longPrompt ? (async () => {
    for (let k = 0; !stopLong.signal.aborted; ++k) {
      try {
        longResults.push(await one(server.url, 2000000 + k, { length: longPrompt, generate: longMaxTokens, text: false, signal: stopLong.signal }));
      } catch (e) {
        if (!stopLong.signal.aborted) throw e;
      }
    }
  })() : Promise.resolve();
  const t0 = performance.now();
  await Promise.all(Array.from({ length: slots }, async () => {
    while (next < requests) results.push(await one(server.url, next++));
  }));
  const wall = (performance.now() - t0) / 1000;
  stopLong.abort();
  await longClient;
  const steps = (await engine.steps(server.url)) - stepsBefore;
  const spec = specBefore ? await specCounters(server.url) : null;
  const rss = peakRssGiB(server.pid);
  if (resent > resentBefore)
    console.error(`  ${engine.name} --parallel ${slots}: ${resent - resentBefore} request(s) sent again after a closed connection`);
  await server.stop();
  const tokens = results.reduce((a, r) => a + r.tokens, 0);
  const ttfts = results.map((r) => r.ttft).sort((a, b) => a - b);
  // Token-weighted: decode tokens over decode seconds, summed over requests.
  const perStream = results.reduce((a, r) => a + r.tokens - 1, 0) / results.reduce((a, r) => a + (r.total - r.ttft) / 1000, 0);
  const longTtft = longResults.reduce((a, r) => a + r.ttft, 0) / Math.max(1, longResults.length);
  return { engine: engine.name, slots, requests, wall, tokens, perStream, steps, spec, specBefore, rss, longTtft, longDone: longResults.length,
    aggregate: tokens / wall, meanTtft: ttfts.reduce((a, t) => a + t, 0) / ttfts.length,
    p95Ttft: ttfts[Math.min(ttfts.length - 1, Math.ceil(0.95 * ttfts.length) - 1)] };
}

console.log(`model ${model} (${quant})${args.gguf ? ` beside llama-server on ${args.gguf}` : ''}; prompt ${repetitive ? 'a repeated passage' : promptTokens + ' tokens'}, ${maxTokens} generated per request${specFlags.length ? '; ' + specFlags.join(' ') : ''}${longPrompt ? `; beside them one client with ${longPrompt}-token prompts` : ''}`);
// aggregate tok/s: all completion tokens over the wall time (prefill included). decode tok/s:
// one stream's rate after its first token; x slots: what the slots decode together (the batched
// throughput once prefill is done). tok/step: tokens per engine step (~slots when batching).
console.log('| engine | slots | requests | wall s | requests/s | aggregate tok/s | mean TTFT ms | p95 TTFT ms | per-stream decode tok/s | decode tok/s x slots | tok/step | peak RSS GiB |' +
  (specFlags.length ? ' tok/target pass | acceptance |' : '') + (longPrompt ? ' long-prompt TTFT ms (done) |' : ''));
console.log('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|' + (specFlags.length ? '---:|---:|' : '') + (longPrompt ? '---:|' : ''));
const rows = [];
for (const [index, slots] of slotsList.entries()) {
  // --requests N, or a list matching --slots (e.g. 2,4,16), else max(2 * slots, 8).
  const requestList = args.requests ? String(args.requests).split(',').map(Number) : [];
  const requests = requestList.length > 1 ? requestList[index] : requestList[0] || Math.max(2 * slots, 8);
  // Alternate which engine goes first, so a drift in the machine's speed favours neither.
  const order = index % 2 ? [...engines].reverse() : engines;
  for (const engine of order) {
    const r = await measure(engine, slots, requests);
    rows.push(r);
    const specCols = specFlags.length && r.spec
      ? ` ${((r.spec.tokens - r.specBefore.tokens) / Math.max(1, r.spec.passes - r.specBefore.passes)).toFixed(2)} |` +
        ` ${((r.spec.accepted - r.specBefore.accepted) / Math.max(1, r.spec.drafted - r.specBefore.drafted)).toFixed(2)} |` : '';
    const longCol = longPrompt ? ` ${r.longDone ? r.longTtft.toFixed(0) : '-'} (${r.longDone}) |` : '';
    console.log(`| ${r.engine} | ${slots} | ${requests} | ${r.wall.toFixed(1)} | ${(requests / r.wall).toFixed(2)} | ${r.aggregate.toFixed(1)} | ${r.meanTtft.toFixed(0)} | ${r.p95Ttft.toFixed(0)} | ${r.perStream.toFixed(2)} | ${(r.perStream * slots).toFixed(1)} | ${Number.isNaN(r.steps) ? '-' : (r.tokens / r.steps).toFixed(1)} | ${r.rss.toFixed(2)} |${specCols}${longCol}`);
  }
}
if (engines.length > 1) {
  console.log('\n| slots | aggregate g4 / llama-server | p95 TTFT g4 / llama-server | per-stream decode g4 / llama-server |');
  console.log('|---:|---:|---:|---:|');
  for (const slots of slotsList) {
    const [g, l] = ['g4', 'llama-server'].map((name) => rows.find((r) => r.engine === name && r.slots === slots));
    console.log(`| ${slots} | ${(g.aggregate / l.aggregate).toFixed(2)}x | ${(g.p95Ttft / l.p95Ttft).toFixed(2)} | ${(g.perStream / l.perStream).toFixed(2)}x |`);
  }
}
if (!args.model) rmSync(model, { recursive: true, force: true });  // the synthetic one made above
process.exit(0);
