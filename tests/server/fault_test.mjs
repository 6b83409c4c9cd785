// Server fault injection (issue 8): a client that disconnects mid-stream, clients that send
// their body one byte per second, SIGTERM with 16 streams in flight, a request storm past the
// queue bound, and a checkpoint rewritten on disk while the server has it mapped.
//   node tests/server/fault_test.mjs     (G4_BIN, G4_BINARY_DIR, G4_SERVE_TEST_MODEL optional)
import net from 'node:net';
import { readFileSync, cpSync, mkdtempSync, rmSync, truncateSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import assert from 'node:assert/strict';
import { startServer, testModel, test, run, sleep, until, metric, haveBinary, skipUnless, atExit, g4 } from './harness.mjs';

skipUnless(haveBinary(), `no g4 binary at ${g4}`);
const model = testModel();

const chatBody = (extra = {}) => JSON.stringify({
  messages: [{ role: 'user', content: 'Tell me a long story about a lighthouse.' }],
  max_tokens: 32, temperature: 0, ...extra,
});
async function post(url, pathname, body, init = {}) {
  return fetch(url + pathname, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body, ...init });
}
function rssMiB(server) {
  const pid = server.proc.pid;
  let status = '';
  try { status = readFileSync(`/proc/${pid}/status`, 'utf8'); } catch { }
  const m = /VmRSS:\s+(\d+) kB/.exec(status);
  if (!m) throw new Error(`g4 serve (pid ${pid}) has no resident set: it has exited (${server.proc.exitCode ?? server.proc.signalCode ?? 'not yet reaped'})`);
  return Number(m[1]) / 1024;
}
// Reads an SSE stream to its end: the finish_reason of the last choice that had one, whether
// [DONE] came, and the number of data events.
async function readStream(res) {
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '', finish = null, done = false, events = 0, error = null;
  for (;;) {
    const { value, done: end } = await reader.read();
    if (end) break;
    buf += dec.decode(value, { stream: true });
    let at;
    while ((at = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, at); buf = buf.slice(at + 2);
      if (!ev.startsWith('data: ')) continue;
      const data = ev.slice(6);
      if (data === '[DONE]') { done = true; continue; }
      events++;
      const j = JSON.parse(data);
      if (j.error) error = j.error;
      for (const c of j.choices || []) if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { finish, done, events, error };
}

test('client disconnecting mid-stream frees its slot; the server carries on', async () => {
  const s = await startServer(model, ['--parallel', '1', '--quiet']);
  const ac = new AbortController();
  const res = await post(s.url, '/v1/chat/completions', chatBody({ stream: true, max_tokens: 3000 }), { signal: ac.signal });
  assert.equal(res.status, 200);
  const reader = res.body.getReader();
  for (let got = 0; got < 3;) { const { value } = await reader.read(); got += (new TextDecoder().decode(value).match(/data: /g) || []).length; }
  ac.abort();
  // The only slot must come free long before 3000 tokens could be generated.
  await until('slot freed', async () => (await metric(s.url, 'g4_slots_busy')) === 0, 10000);
  assert.equal(await metric(s.url, 'g4_finish_total', 'cancelled'), 1);
  const r = await post(s.url, '/v1/chat/completions', chatBody({ max_tokens: 4 }));
  assert.equal(r.status, 200);
  // Same for a non-streaming request whose client goes away while it waits.
  const ac2 = new AbortController();
  const p = post(s.url, '/v1/chat/completions', chatBody({ max_tokens: 3000 }), { signal: ac2.signal }).catch(() => null);
  await until('running', async () => (await metric(s.url, 'g4_slots_busy')) === 1);
  ac2.abort();
  await p;
  await until('slot freed again', async () => (await metric(s.url, 'g4_slots_busy')) === 0, 10000);
  assert.equal(await metric(s.url, 'g4_finish_total', 'cancelled'), 2);
  assert.equal(s.proc.exitCode, null);
});

test('clients sending their body one byte per second neither block others nor hold a thread forever', async () => {
  const s = await startServer(model, ['--parallel', '1', '--quiet', '--body-timeout', '3']);
  const { hostname, port } = new URL(s.url);
  const body = chatBody();
  const slow = [];
  let connected = 0;
  for (let i = 0; i < 8; i++) {
    slow.push(new Promise((resolve) => {
      const sock = net.connect(Number(port), hostname, () => {
        connected++;
        sock.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`);
        let i = 0;
        const timer = setInterval(() => { if (i < body.length && !sock.destroyed) sock.write(body[i++]); }, 1000);
        let answer = '';
        const t0 = Date.now();
        sock.on('data', (d) => { answer += d; });
        sock.on('close', () => { clearInterval(timer); resolve({ answer, seconds: (Date.now() - t0) / 1000 }); });
        sock.on('error', () => {});
      });
    }));
  }
  await until('the 8 slow clients to connect', async () => connected === 8);
  await sleep(500);  // and to be reading their first bytes: the normal client must not wait behind them
  // Meanwhile a normal client is served at once.
  const t0 = Date.now();
  const r = await post(s.url, '/v1/chat/completions', chatBody({ max_tokens: 4 }));
  assert.equal(r.status, 200);
  assert.ok(Date.now() - t0 < (process.env.G4_SANITIZED ? 20000 : 5000), 'normal request waited behind slow clients');
  // Each slow client is cut off at the body deadline (408), not after body.length seconds.
  for (const { answer, seconds } of await Promise.all(slow)) {
    assert.ok(seconds < 10, `slow client held its connection ${seconds} s`);
    assert.match(answer, /^HTTP\/1\.1 408/, answer.slice(0, 200));
  }
  assert.equal(s.proc.exitCode, null);
});

test('SIGTERM with 16 streams in flight: every stream ends with a finish reason, exit 0', async () => {
  const s = await startServer(model, ['--parallel', '4', '--max-queue', '32', '--grace', '2', '--quiet']);
  const streams = [];
  for (let i = 0; i < 16; i++) {
    streams.push(post(s.url, '/v1/chat/completions', chatBody({ stream: true, max_tokens: 200 + 600 * (i % 4) }))
      .then(async (res) => (res.status === 200 ? readStream(res) : { status: res.status })));
  }
  // SIGTERM only once all 16 are accepted (running, queued or already finished): a request that
  // arrives after it gets 503 draining, which is right but not what this test is about.
  await until('all 16 accepted', async () => {
    let finished = 0;
    for (const reason of ['stop', 'length', 'cancelled', 'timeout', 'error'])
      finished += (await metric(s.url, 'g4_finish_total', `reason="${reason}"`)) || 0;
    return (await metric(s.url, 'g4_slots_busy')) + (await metric(s.url, 'g4_queue_depth')) + finished >= 16;
  });
  s.proc.kill('SIGTERM');
  const t0 = Date.now();
  const results = await Promise.race([Promise.all(streams), sleep(20000).then(() => null)]);
  assert.ok(results, 'a stream hung after SIGTERM');
  const { code, signal } = await s.exited;
  assert.equal(code, 0, `exit ${code} ${signal}`);
  assert.ok(Date.now() - t0 < 15000);
  const reasons = {};
  for (const r of results) {
    assert.ok(r.done, `a stream ended without [DONE]: ${JSON.stringify(r)}`);
    assert.ok(['stop', 'length', 'cancelled', 'timeout'].includes(r.finish), JSON.stringify(r));
    reasons[r.finish] = (reasons[r.finish] || 0) + 1;
  }
  console.log('     finish reasons after SIGTERM:', JSON.stringify(reasons));
});

test('a request storm past the queue bound gets 429s and memory stays flat', async () => {
  const s = await startServer(model, ['--parallel', '2', '--max-queue', '4', '--quiet']);
  const errors = new Set();  // why fetches failed, if any did
  const storm = async () => {
    const codes = {};
    const all = [];
    for (let i = 0; i < 150; i++) {
      all.push(post(s.url, '/v1/chat/completions', chatBody({ max_tokens: 8, stream: i % 2 === 0 }))
        .then(async (r) => { await r.arrayBuffer(); codes[r.status] = (codes[r.status] || 0) + 1; if (r.status === 429) assert.ok(r.headers.get('retry-after')); })
        .catch((e) => {
          codes.reset = (codes.reset || 0) + 1;
          errors.add(String((e && e.cause && (e.cause.code || e.cause.message)) || e));
        }));
    }
    await Promise.all(all);
    return codes;
  };
  await storm();  // warm-up: allocators and thread stacks reach their working size
  const before = rssMiB(s);
  let last;
  for (let round = 0; round < 3; round++) last = await storm();
  const after = rssMiB(s);
  console.log(`     last storm: ${JSON.stringify(last)}; RSS ${before.toFixed(1)} -> ${after.toFixed(1)} MiB`);
  assert.ok(last[429] > 0, 'no 429 in a storm of 150 against a queue of 4');
  assert.ok(last[200] > 0);
  // Every request gets an answer. Under a sanitizer the server runs 5-15x slower and 150
  // connections at once can outlast the client's connect timeout, so there a failed fetch is
  // tolerated as long as the server survives the storms (the sanitizer halts it on any error)
  // and still answers; a release build must answer every one.
  const unanswered = Object.keys(last).filter((c) => c !== '200' && c !== '429');
  if (process.env.G4_SANITIZED) {
    if (unanswered.length) console.log(`     (sanitizer build) fetches that failed: ${[...errors].join(', ')}`);
    assert.equal(s.proc.exitCode, null, 'server died in the storm');
    assert.equal((await fetch(s.url + '/health')).status, 200);
  } else {
    assert.deepEqual(unanswered, [], `fetch errors: ${[...errors].join(', ')}`);
  }
  // Sanitizer builds hold freed memory in quarantine (ASan) or shadow it (TSan): no bound there.
  if (!process.env.G4_SANITIZED) assert.ok(after - before < 32, `RSS grew ${after - before} MiB over 3 storms`);
  assert.equal(await metric(s.url, 'g4_queue_depth'), 0);
});

test('checkpoint rewritten while mapped: requests get 503 model_changed, no SIGBUS', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'g4-fault-model-'));
  atExit(() => rmSync(dir, { recursive: true, force: true }));
  cpSync(model, dir, { recursive: true });
  const s = await startServer(dir, ['--parallel', '1', '--quiet']);
  assert.equal((await post(s.url, '/v1/chat/completions', chatBody({ max_tokens: 4 }))).status, 200);
  truncateSync(path.join(dir, 'model.safetensors'), 4096);
  const r = await post(s.url, '/v1/chat/completions', chatBody({ max_tokens: 4 }));
  assert.equal(r.status, 503);
  const j = await r.json();
  assert.equal(j.error.code, 'model_changed');
  assert.match(j.error.message, /model\.safetensors/);
  assert.equal((await fetch(s.url + '/health')).status, 503);
  assert.equal(s.proc.exitCode, null, 'server died');
});

await run('server fault injection');
