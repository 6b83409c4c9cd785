// Shared helpers for the g4 serve end-to-end tests: find the binary, make (or take) a tiny
// synthetic model, start `g4 serve` on a free loopback port, and a minimal test runner.
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, existsSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

export const sourceDir = process.env.G4_SOURCE_DIR || path.resolve(path.dirname(new URL(import.meta.url).pathname), '../..');
export const binaryDir = process.env.G4_BINARY_DIR || path.join(sourceDir, 'build');
export const g4 = process.env.G4_BIN || path.join(binaryDir, 'g4');
export const assets = process.env.G4_ASSETS || path.join(sourceDir, 'assets');

const cleanups = [];
// Servers started by the running test: when it fails, the stderr of any that died is printed
// (a sanitizer report or a crash message is otherwise lost).
let startedInTest = [];
export function atExit(fn) { cleanups.push(fn); }
async function cleanup() { for (const fn of cleanups.reverse()) { try { await fn(); } catch { } } }

// A model directory: $G4_SERVE_TEST_MODEL, else a tiny synthetic E2B (real vocabulary, so the
// real tokenizer's ids fit) written by `g4 synth`.
export function testModel() {
  if (process.env.G4_SERVE_TEST_MODEL) return process.env.G4_SERVE_TEST_MODEL;
  const dir = mkdtempSync(path.join(tmpdir(), 'g4-serve-test-'));
  atExit(() => rmSync(dir, { recursive: true, force: true }));
  execFileSync(g4, ['synth', '--preset', 'e2b', '--out', dir], { stdio: ['ignore', 'ignore', 'inherit'] });
  return dir;
}

// Starts `g4 serve` with extra flags; resolves once /health says ok (unless waitReady is false).
// `launcher`: a command line that runs g4 (e.g. mpirun and its flags), g4's path appended.
export async function startServer(model, flags = [], { env = {}, waitReady = true, launcher = [] } = {}) {
  const threads = flags.includes('--threads') ? [] : ['--threads', '1'];  // 2 shared cores: no spinning pools
  const args = ['serve', '--model', model, '--port', '0', ...threads, ...flags];
  const [cmd, cmdArgs] = launcher.length ? [launcher[0], [...launcher.slice(1), g4, ...args]] : [g4, args];
  const proc = spawn(cmd, cmdArgs, { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('g4 serve did not start:\n' + log)), 30000);
    proc.stderr.on('data', (d) => {
      log += d;
      const m = /listening on (http:\/\/[0-9.]+:[0-9]+)/.exec(log);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    proc.on('exit', () => { clearTimeout(timer); reject(new Error('g4 serve exited:\n' + log)); });
  });
  const server = { proc, url, exited, log: () => log };
  startedInTest.push(server);
  atExit(async () => { if (proc.exitCode === null) { proc.kill('SIGKILL'); await exited; } });
  if (waitReady) await waitHealthy(url);
  return server;
}

export async function waitHealthy(url, timeoutMs = 60000) {
  const t0 = Date.now();
  while (Date.now() - t0 < timeoutMs) {
    try {
      const r = await fetch(url + '/health');
      if (r.status === 200) return;
    } catch { }
    await sleep(50);
  }
  throw new Error('server not healthy at ' + url);
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Polls `fn` until it returns true; throws, naming `what`, after `ms`. For the events a test needs
// before its next step: a fixed sleep races on a slow (sanitizer) machine.
export async function until(what, fn, ms = 30000) {
  const t0 = Date.now();
  while (Date.now() - t0 < ms) { if (await fn()) return; await sleep(50); }
  throw new Error(`timed out after ${ms / 1000} s waiting for ${what}`);
}

// A metric's value from /metrics text (first series matching name and label substring).
export async function metric(url, name, labels = '', headers = {}) {
  const text = await (await fetch(url + '/metrics', { headers })).text();
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const [series, value] = line.split(' ');
    if ((series === name || series.startsWith(name + '{')) && series.includes(labels)) return Number(value);
  }
  return undefined;
}

// A sanitizer report from its first line, else the end of the log.
function excerpt(log) {
  const at = log.search(/WARNING: ThreadSanitizer|ERROR: AddressSanitizer|runtime error:/);
  return at >= 0 ? log.slice(at, at + 12000) : log.slice(-6000);
}

// Minimal runner: named async tests, run in order; failures are collected and reported.
const tests = [];
export function test(name, fn) { tests.push({ name, fn }); }
export async function run(title) {
  let failed = 0, ran = 0;
  const t0 = Date.now();
  for (const { name, fn } of tests) {
    // G4_TEST_FILTER=substring runs only the matching tests (for reproducing one failure).
    if (process.env.G4_TEST_FILTER && !name.includes(process.env.G4_TEST_FILTER)) continue;
    const t = Date.now();
    ran++;
    try {
      await fn();
      console.log(`ok   ${name} (${Date.now() - t} ms)`);
    } catch (e) {
      failed++;
      console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
      for (const s of startedInTest) {
        if (s.proc.exitCode !== null && s.proc.exitCode !== 0 || s.proc.signalCode) {
          console.log(`     g4 serve (pid ${s.proc.pid}) ended with ${s.proc.exitCode ?? s.proc.signalCode}; its stderr:\n` + excerpt(s.log()));
        }
      }
    }
    startedInTest = [];
  }
  console.log(`${title}: ${ran - failed}/${ran} passed in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  await cleanup();
  process.exit(failed ? 1 : 0);
}

export function skipUnless(cond, why) {
  if (!cond) { console.log('SKIP: ' + why); process.exit(77); }
}

export function haveBinary() { return existsSync(g4); }
