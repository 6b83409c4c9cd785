// g4 serve under tensor parallelism (issue 6): `g4 serve --tp 2` (rank threads in one process)
// and `mpirun -np 2 g4 serve --tp 2` (rank 0 serves, rank 1 follows) give the same greedy text
// as `g4 serve --tp 1` on the same tiny model, for plain, streaming and concurrent requests, also
// with speculative decoding (--spec ngram, draft, mtp); and SIGTERM to rank 0 ends every rank with exit
// status 0.
//   node tests/server/tp_test.mjs     (G4_BIN, G4_BINARY_DIR optional)
import { execFileSync, execSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import assert from 'node:assert/strict';
import { startServer, test, run, haveBinary, skipUnless, atExit, metric, g4 } from './harness.mjs';

skipUnless(haveBinary(), `no g4 binary at ${g4}`);

// Tiny presets with the real vocabulary (the real tokenizer's ids must fit): E2B (its one KV
// head replicated on both ranks) and E4B (8 query / 2 KV heads: K/V split with the grouping).
function synth(preset, extra = []) {
  const dir = mkdtempSync(path.join(tmpdir(), `g4-tp-${preset}-`));
  atExit(() => rmSync(dir, { recursive: true, force: true }));
  execFileSync(g4, ['synth', '--preset', preset, '--out', dir, ...extra], { stdio: ['ignore', 'ignore', 'inherit'] });
  return dir;
}

function haveMpi() {
  try { execSync('command -v mpirun', { stdio: 'ignore' }); } catch { return false; }
  // A g4 built without MPI says so when started under mpirun.
  try {
    const out = execSync(`${MPIRUN.join(' ')} -np 1 ${g4} serve --model /nonexistent --tp 1 2>&1 || true`,
      { env: { ...process.env, ...MPI_ENV }, encoding: 'utf8', timeout: 60000 });
    return !out.includes('built without MPI');
  } catch { return false; }
}
// As tests/tensor_parallel_test.cc runs mpirun: root allowed, 2 cores oversubscribed,
// shared-memory transport without CMA (containers lack the ptrace rights).
const MPI_ENV = {
  OMPI_MCA_btl: 'self,vader', OMPI_MCA_btl_vader_single_copy_mechanism: 'none',
  OMPI_MCA_rmaps_base_oversubscribe: '1', OMPI_MCA_hwloc_base_binding_policy: 'none',
  OMPI_MCA_mpi_yield_when_idle: '1', ASAN_OPTIONS: 'detect_leaks=0',
};
const MPIRUN = ['mpirun', '--allow-run-as-root', '--oversubscribe'];
const mpi = haveMpi();
if (!mpi) console.log('note: mpirun (or an MPI build of g4) not found: the mpirun servers are skipped');

async function post(url, pathname, body) {
  const r = await fetch(url + pathname, { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body) });
  return r;
}
const chat = (content, extra = {}) => ({
  messages: [{ role: 'user', content }], max_tokens: 24, temperature: 0, ignore_eos: true, ...extra,
});
async function chatText(url, body) {
  const r = await post(url, '/v1/chat/completions', body);
  const j = await r.json();
  assert.equal(r.status, 200, JSON.stringify(j));
  assert.equal(j.usage.completion_tokens, body.max_tokens);
  return j.choices[0].message.content;
}
async function streamText(url, body) {
  const r = await post(url, '/v1/chat/completions', { ...body, stream: true });
  assert.equal(r.status, 200);
  const text = await r.text();
  let out = '', done = false;
  for (const ev of text.split('\n\n')) {
    if (!ev.startsWith('data: ')) continue;
    if (ev === 'data: [DONE]') { done = true; continue; }
    const j = JSON.parse(ev.slice(6));
    assert.ok(!j.error, JSON.stringify(j.error));
    for (const c of j.choices || []) out += (c.delta && c.delta.content) || '';
  }
  assert.ok(done, 'the stream ended without [DONE]');
  return out;
}

// What each server is asked; the answers must agree across servers.
async function workload(url) {
  const out = {};
  out.plain = await chatText(url, chat('Tell me about lighthouses.'));
  out.stream = await streamText(url, chat('Tell me about lighthouses.'));
  // Two at once: batched into the same forward steps (--parallel 2).
  [out.concurrentA, out.concurrentB] = await Promise.all([
    chatText(url, chat('Name three rivers in Europe.', { max_tokens: 20 })),
    streamText(url, chat('Write a haiku about the sea, then explain it at length.', { max_tokens: 28 })),
  ]);
  // A shared prefix with an earlier prompt in a free slot: the cache is rewound, not refilled.
  out.reuse = await chatText(url, chat('Tell me about lighthouses and their keepers.'));
  const c = await post(url, '/v1/completions', { prompt: 'The lighthouse keeper said', max_tokens: 16, temperature: 0,
    ignore_eos: true });
  assert.equal(c.status, 200);
  out.completion = (await c.json()).choices[0].text;
  return out;
}

// SIGTERM to rank 0 (the spawned g4, or under mpirun the process rank 0 names in its log);
// every rank must end with status 0, which mpirun's own status reports.
async function stopAndCheck(s, viaMpi) {
  let pid = s.proc.pid;
  if (viaMpi) {
    const m = /this is rank 0 \(pid (\d+)\)/.exec(s.log());
    assert.ok(m, 'rank 0 did not log its pid:\n' + s.log());
    pid = Number(m[1]);
  }
  process.kill(pid, 'SIGTERM');
  const timer = setTimeout(() => s.proc.kill('SIGKILL'), 60000);
  const { code, signal } = await s.exited;
  clearTimeout(timer);
  assert.equal(signal, null, 'killed by ' + signal + ':\n' + s.log());
  assert.equal(code, 0, s.log());
  assert.match(s.log(), /stopped/);
  // Only rank 0 writes: one "listening" line, however many ranks.
  assert.equal((s.log().match(/listening on/g) || []).length, 1, s.log());
}

for (const preset of ['e2b', 'e4b']) {
  test(`${preset}: --tp 2 (threads${mpi ? ' and mpirun -np 2' : ''}) serves the same greedy text as --tp 1`, async () => {
    const model = synth(preset);
    const flags = ['--parallel', '2', '--quiet', '--ctx', '512'];
    const one = await startServer(model, [...flags, '--tp', '1']);
    const want = await workload(one.url);
    await stopAndCheck(one, false);
    assert.equal(want.stream, want.plain);  // streaming and not are the same generation
    assert.ok(want.plain.length > 0 && want.concurrentA.length > 0);

    const threads = await startServer(model, [...flags, '--tp', '2']);
    assert.match(threads.log(), /tensor parallel over 2 ranks/);
    assert.deepEqual(await workload(threads.url), want);
    await stopAndCheck(threads, false);

    if (mpi) {
      const procs = await startServer(model, [...flags, '--tp', '2'], { env: MPI_ENV, launcher: [...MPIRUN, '-np', '2'] });
      assert.match(procs.log(), /tensor parallel over 2 mpirun processes/);
      assert.deepEqual(await workload(procs.url), want);
      await stopAndCheck(procs, true);
    }
  });
}

// Speculative decoding under tensor parallelism: the drafter runs on rank 0 and its rows reach
// the other ranks with the step, whose caches follow rank 0's rollbacks by position. Repetitive
// prompts, so prompt lookup drafts (the random model rarely repeats, so they are rejected); the
// draft model is the target's weights rounded to f16 (same seed), whose greedy drafts are mostly
// but not always the target's: full and partial acceptances, rollbacks on every rank. The
// assistant (random, so its drafts are rejected) reads rank 0's cache.
async function repetitive(url) {
  const units = ['the red fox jumps over the lazy dog', 'one two three four five six', 'abc def abc def ghi'];
  return Promise.all(units.map(async (u, i) => {
    const r = await post(url, '/v1/completions', { prompt: `${u}. ${u}. ${u}.`, max_tokens: 18 + i,
      temperature: 0, ignore_eos: true, stream: i === 1 });
    assert.equal(r.status, 200);
    if (i !== 1) return (await r.json()).choices[0].text;
    let text = '';
    for (const ev of (await r.text()).split('\n\n'))
      if (ev.startsWith('data: {')) for (const c of JSON.parse(ev.slice(6)).choices || []) text += c.text || '';
    return text;
  }));
}

test(`e2b: --spec ngram, draft and mtp under --tp 2 (threads${mpi ? ' and mpirun -np 2' : ''}) serve the plain greedy text`, async () => {
  const model = synth('e2b');
  const near = synth('e2b', ['--dtype', 'f16']);
  const flags = ['--parallel', '3', '--quiet', '--ctx', '256'];
  const plain = await startServer(model, flags);
  const want = await repetitive(plain.url);
  await stopAndCheck(plain, false);
  // E2B's one KV head is on every rank, so the assistant drafts from rank 0's cache alone.
  const assistant = synth('e2b-assistant');
  const runs = [['threads', ['--tp', '2', '--spec', 'ngram', '--draft-max', '4'], {}],
    ['threads', ['--tp', '2', '--spec', 'draft', '--draft', near, '--draft-max', '3'], {}],
    ['threads', ['--tp', '2', '--spec', 'mtp', '--draft', assistant, '--draft-max', '3'], {}]];
  if (mpi)
    for (const [, extra] of runs.slice()) runs.push(['mpirun', extra, { env: MPI_ENV, launcher: [...MPIRUN, '-np', '2'] }]);
  for (const [how, extra, opts] of runs) {
    const s = await startServer(model, [...flags, ...extra], opts);
    assert.deepEqual(await repetitive(s.url), want, `${how} ${extra.join(' ')}`);
    const drafted = await metric(s.url, 'g4_spec_drafted_tokens_total');
    const accepted = await metric(s.url, 'g4_spec_accepted_tokens_total');
    console.log(`     ${how} ${extra.join(' ')}: drafted ${drafted}, accepted ${accepted}`);
    assert.ok(drafted > 0, `${how} ${extra.join(' ')}: nothing drafted, the comparison proves nothing`);
    if (extra.includes('draft'))
      assert.ok(accepted > 0 && accepted < drafted, `${how} ${extra.join(' ')}: ${accepted} of ${drafted} accepted`);
    await stopAndCheck(s, how === 'mpirun');
  }
});

// E4B splits its 2 KV heads over the ranks, so the assistant drafts on every rank in lockstep:
// rank 0 sends each proposal to the followers, whose halves of the attention are summed in.
// The random assistant's drafts are all rejected, so the greedy text alone would not show that
// they are right; with --draft-p-min 0.3 a chain stops where the assistant's top probability
// falls below 0.3, so the drafted count follows every drafting step's arithmetic, which must
// come out as on one rank.
test(`e4b: --spec mtp under --tp 2 (threads${mpi ? ' and mpirun -np 2' : ''}) drafts on every rank, as on one`, async () => {
  const model = synth('e4b');
  const assistant = synth('e4b-assistant');
  const flags = ['--parallel', '3', '--quiet', '--ctx', '256', '--spec', 'mtp', '--draft', assistant,
    '--draft-max', '3', '--draft-p-min', '0.3'];
  const one = await startServer(model, flags);
  const want = await repetitive(one.url);
  const wantDrafted = await metric(one.url, 'g4_spec_drafted_tokens_total');
  await stopAndCheck(one, false);
  const runs = [['threads', {}]];
  if (mpi) runs.push(['mpirun', { env: MPI_ENV, launcher: [...MPIRUN, '-np', '2'] }]);
  for (const [how, opts] of runs) {
    const s = await startServer(model, [...flags, '--tp', '2'], opts);
    assert.deepEqual(await repetitive(s.url), want, how);
    const drafted = await metric(s.url, 'g4_spec_drafted_tokens_total');
    console.log(`     ${how}: drafted ${drafted} (one rank: ${wantDrafted})`);
    assert.equal(drafted, wantDrafted, how);
    await stopAndCheck(s, how === 'mpirun');
  }
  // The chain did stop early somewhere, or the count shows nothing.
  const full = await startServer(model, flags.slice(0, -2));
  await repetitive(full.url);
  assert.ok(wantDrafted < await metric(full.url, 'g4_spec_drafted_tokens_total'));
  await stopAndCheck(full, false);
});

test('--tp the model cannot be split over is refused at the door', async () => {
  const model = synth('e2b');
  let out = '', code = 0;
  try {
    execFileSync(g4, ['serve', '--model', model, '--port', '0', '--tp', '3'], { encoding: 'utf8', stdio: 'pipe' });
  } catch (e) { out = e.stderr; code = e.status; }
  assert.equal(code, 2, out);
  assert.match(out, /--tp 3/);
  if (mpi) {
    // Under mpirun a --tp other than -np is refused by every rank; the job ends (no rank waits).
    let mcode = 0;
    try {
      execFileSync(MPIRUN[0], [...MPIRUN.slice(1), '-np', '2', g4, 'serve', '--model', model, '--port', '0', '--tp', '4'],
        { env: { ...process.env, ...MPI_ENV }, encoding: 'utf8', stdio: 'pipe', timeout: 60000 });
    } catch (e) { mcode = e.status; out = e.stderr; }
    assert.notEqual(mcode, 0);
    assert.match(out, /--tp 4 but mpirun started 2 ranks/);
  }
});

await run('tp_test');
