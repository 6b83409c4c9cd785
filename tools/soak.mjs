#!/usr/bin/env node
// Soak test (issue 8; not part of the default test run): g4 serve on a tiny synthetic model under
// continuous mixed load for a set time: chat and completions, streaming and not, tools and stop
// strings, invalid requests (bad JSON, unknown fields, context overflow, unknown routes), and
// clients that cancel mid-stream or mid-wait. Reports requests served, outcomes by kind, p50/p99
// latency and the server's resident memory at start and end; fails on a crash, an unexpected
// status, or a hang.
//
//   node tools/soak.mjs [--minutes 10] [--clients 8] [--parallel 4] [--threads 2] [--model DIR]
//                       [--json OUT.json]
// G4_BIN (default build/g4); without --model a tiny E2B is written with `g4 synth`.
import { readFileSync, writeFileSync, mkdtempSync, rmSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startServer, sleep, metric, g4 } from '../tests/server/harness.mjs';

const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => {
  if (a.startsWith('--')) acc.push([a.slice(2), all[i + 1] && !all[i + 1].startsWith('--') ? all[i + 1] : true]);
  return acc;
}, []));
const minutes = Number(args.minutes || 10);
const clients = Number(args.clients || 8);
const parallel = String(args.parallel || 4);
const threads = String(args.threads || 2);
let model = args.model, scratch = null;
if (!model) {
  scratch = mkdtempSync(path.join(tmpdir(), 'g4-soak-'));
  execFileSync(g4, ['synth', '--preset', 'e2b', '--scale', 'tiny', '--out', scratch], { stdio: ['ignore', 'ignore', 'inherit'] });
  model = scratch;
}

const server = await startServer(model, ['--parallel', parallel, '--max-queue', '16', '--threads', threads,
                                         '--ctx', '512', '--quiet']);
const url = server.url;
const rssMiB = () => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${server.proc.pid}/status`, 'utf8'))[1]) / 1024;

const rnd = (n) => Math.floor(Math.random() * n);
const words = 'the a lighthouse keeper storm ship night light sea rock wave gull bell fog harbor'.split(' ');
const sentence = (n) => Array.from({ length: n }, () => words[rnd(words.length)]).join(' ');
const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather for a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];

// Each kind: weight, the request, and the statuses that count as correct for it.
const kinds = {
  chat:          { w: 22, ok: [200], req: () => ['/v1/chat/completions', { messages: [{ role: 'user', content: sentence(5 + rnd(30)) }], max_tokens: 1 + rnd(48) }] },
  chat_stream:   { w: 20, ok: [200], stream: true, req: () => ['/v1/chat/completions', { messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: sentence(5 + rnd(30)) }], max_tokens: 1 + rnd(64), stream: true, stream_options: { include_usage: true } }] },
  chat_tools:    { w: 6, ok: [200], req: () => ['/v1/chat/completions', { messages: [{ role: 'user', content: 'Weather in ' + sentence(2) }], tools, max_tokens: 16, temperature: 0.8, seed: rnd(1000) }] },
  completion:    { w: 10, ok: [200], req: () => ['/v1/completions', { prompt: sentence(3 + rnd(20)), max_tokens: 1 + rnd(32), stop: ['\n\n'], temperature: 1, top_p: 0.9 }] },
  completion_stream: { w: 6, ok: [200], stream: true, req: () => ['/v1/completions', { prompt: sentence(10), max_tokens: 1 + rnd(32), stream: true, logprobs: 2 }] },
  tokenize:      { w: 4, ok: [200], req: () => ['/tokenize', { content: sentence(20), with_pieces: true }] },
  bad_json:      { w: 4, ok: [400], raw: true, req: () => ['/v1/chat/completions', '{"messages": [' + sentence(3)] },
  bad_field:     { w: 4, ok: [400], req: () => ['/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], temperature: 'hot' }] },
  too_long:      { w: 3, ok: [400], req: () => ['/v1/completions', { prompt: sentence(700), max_tokens: 4 }] },
  not_found:     { w: 2, ok: [404], req: () => ['/v1/nothing', { x: 1 }] },
  cancel_stream: { w: 8, ok: [200, 'aborted'], stream: true, cancelAfterEvents: () => 1 + rnd(5), req: () => ['/v1/chat/completions', { messages: [{ role: 'user', content: sentence(10) }], max_tokens: 400, stream: true }] },
  cancel_wait:   { w: 5, ok: [200, 'aborted'], cancelAfterMs: () => 20 + rnd(400), req: () => ['/v1/chat/completions', { messages: [{ role: 'user', content: sentence(10) }], max_tokens: 300 }] },
};
const bag = Object.entries(kinds).flatMap(([k, v]) => Array(v.w).fill(k));
const stats = Object.fromEntries(Object.keys(kinds).map((k) => [k, { n: 0, outcomes: {}, lat: [] }]));
const unexpected = [];

async function once(kindName) {
  const kind = kinds[kindName];
  const [path, body] = kind.req();
  const ac = new AbortController();
  const t0 = performance.now();
  let outcome;
  const hang = setTimeout(() => ac.abort('hang'), 120000);
  try {
    if (kind.cancelAfterMs) setTimeout(() => ac.abort('client'), kind.cancelAfterMs());
    const res = await fetch(url + path, { method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: kind.raw ? body : JSON.stringify(body), signal: ac.signal });
    outcome = res.status;
    if (kind.stream && res.status === 200) {
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      let text = '', events = 0, finished = false;
      const stopAt = kind.cancelAfterEvents ? kind.cancelAfterEvents() : Infinity;
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        text += dec.decode(value, { stream: true });
        events = (text.match(/\ndata: |^data: /g) || []).length;
        if (events >= stopAt) { ac.abort('client'); outcome = 'aborted'; break; }
      }
      if (outcome === 200) {
        finished = text.includes('data: [DONE]');
        if (!finished) outcome = 'stream_without_done';
        else if (/"error"/.test(text)) outcome = 'stream_error';
      }
    } else {
      const text = await res.text();
      if (res.status === 200 && !kind.stream) JSON.parse(text);
    }
  } catch (e) {
    outcome = ac.signal.aborted ? (ac.signal.reason === 'hang' ? 'hang' : 'aborted') : 'network:' + (e.cause?.code || e.name);
  } finally {
    clearTimeout(hang);
  }
  const ms = performance.now() - t0;
  const s = stats[kindName];
  s.n++;
  s.outcomes[outcome] = (s.outcomes[outcome] || 0) + 1;
  if (outcome === 200) s.lat.push(ms);
  // 429 is the server shedding load (queue full): expected under a burst, counted separately.
  if (!kind.ok.includes(outcome) && outcome !== 429) unexpected.push({ kind: kindName, outcome, ms: Math.round(ms) });
}

const deadline = Date.now() + minutes * 60000;
await sleep(1000);
const rssStart = rssMiB();
let rssMax = rssStart;
const samples = [];
const sampler = setInterval(() => { const r = rssMiB(); rssMax = Math.max(rssMax, r); samples.push(Math.round(r)); }, 10000);
const t0 = Date.now();
await Promise.all(Array.from({ length: clients }, async () => {
  while (Date.now() < deadline && server.proc.exitCode === null) await once(bag[rnd(bag.length)]);
}));
clearInterval(sampler);
const elapsed = (Date.now() - t0) / 1000;
// Let cancelled sequences drain, then read the server's own view.
await sleep(2000);
const rssEnd = rssMiB();
const alive = server.proc.exitCode === null;
const finishes = {};
for (const reason of ['stop', 'length', 'cancelled', 'timeout', 'error'])
  finishes[reason] = (await metric(url, 'g4_finish_total', `reason="${reason}"`)) || 0;
const busy = await metric(url, 'g4_slots_busy');
server.proc.kill('SIGTERM');
const exit = await Promise.race([server.exited, sleep(60000).then(() => ({ code: 'hung' }))]);

const pct = (a, p) => { if (!a.length) return null; const s = [...a].sort((x, y) => x - y); return Math.round(s[Math.min(s.length - 1, Math.floor(p * s.length))]); };
const total = Object.values(stats).reduce((a, s) => a + s.n, 0);
const report = {
  minutes, clients, parallel: Number(parallel), threads: Number(threads), seconds: Math.round(elapsed),
  requests: total, requests_per_second: +(total / elapsed).toFixed(1),
  by_kind: Object.fromEntries(Object.entries(stats).map(([k, s]) => [k, { n: s.n, outcomes: s.outcomes,
    p50_ms: pct(s.lat, 0.5), p99_ms: pct(s.lat, 0.99) }])),
  unexpected: unexpected.length, unexpected_examples: unexpected.slice(0, 10),
  server_finish_reasons: finishes, slots_busy_after: busy,
  rss_mib: { start: +rssStart.toFixed(1), end: +rssEnd.toFixed(1), max: +rssMax.toFixed(1), samples_every_10s: samples },
  alive_at_end: alive, exit_after_sigterm: exit,
};
console.log(JSON.stringify(report, null, 2));
if (args.json) writeFileSync(args.json, JSON.stringify(report, null, 2));
const failed = !alive || unexpected.length > 0 || exit.code !== 0 || busy !== 0;
console.log(failed ? 'SOAK FAILED' : 'SOAK OK');
if (scratch) rmSync(scratch, { recursive: true, force: true });
process.exit(failed ? 1 : 0);
