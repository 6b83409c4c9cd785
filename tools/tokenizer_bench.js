#!/usr/bin/env node
// Hugging Face tokenizers (Rust core, Node binding) on the same text as bench/tokenizer_bench.cc:
// load time of tokenizer.json, encode throughput of the whole text in one call and line by line,
// decode throughput. Prints a table for docs/performance.md; then run the C++ side with
//   build/g4_microbench --benchmark_filter=Tokenizer
// usage: node tools/tokenizer_bench.js [--assets DIR] [--reps 10]
'use strict';
const fs = require('fs');
const path = require('path');

const args = { reps: 10 };
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
const root = path.resolve(__dirname, '..');
const assets = args.assets || process.env.G4_ASSETS || path.join(root, 'assets');
const { Tokenizer } = require(path.join(assets, 'npm/node_modules/tokenizers'));
const file = path.join(assets, 'tokenizer', 'gemma4.json');

// Same as BenchText() in bench/tokenizer_bench.cc.
function BenchText() {
  const exts = new Set(['.cc', '.h', '.js', '.py', '.json', '.md']);
  const files = [];
  const walk = (dir) => {
    if (!fs.existsSync(path.join(root, dir))) return;
    for (const e of fs.readdirSync(path.join(root, dir), { withFileTypes: true })) {
      const rel = path.join(dir, e.name);
      if (e.isDirectory()) walk(rel);
      else if (e.isFile() && exts.has(path.extname(e.name))) files.push(rel);
    }
  };
  for (const dir of ['src', 'tests/data', 'tools', 'docs']) walk(dir);
  files.sort((a, b) => (Buffer.compare(Buffer.from(a), Buffer.from(b))));
  return Buffer.concat(files.map((f) => fs.readFileSync(path.join(root, f))));
}

const now = () => Number(process.hrtime.bigint()) / 1e6;
const cpu = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1e3; };

(async () => {
  const bytes = BenchText();
  const text = bytes.toString('utf8');
  const lines = text.split('\n');
  const reps = Number(args.reps);
  const rows = [];
  const measure = async (name, n, fn) => {
    await fn();  // warm-up
    const t0 = now(), c0 = cpu();
    for (let i = 0; i < n; ++i) await fn();
    const wall = (now() - t0) / n, cpuMs = (cpu() - c0) / n;
    rows.push({ name, wall, cpuMs });
    return { wall, cpuMs };
  };
  let loaded;
  await measure('load tokenizer.json', 3, async () => { loaded = Tokenizer.fromFile(file); });
  const t = loaded;
  let ids;
  await measure('encode whole text', reps, async () => {
    ids = (await t.encode(text, null, { addSpecialTokens: false })).getIds();
  });
  await measure('encode line by line', Math.max(1, reps / 5), async () => {
    for (const line of lines) await t.encode(line, null, { addSpecialTokens: false });
  });
  await measure('decode whole text', reps, async () => { await t.decode(Array.from(ids), false); });
  console.log(`HF tokenizers (npm tokenizers, Node ${process.version}), ${file}`);
  console.log(`text: ${bytes.length} bytes, ${ids.length} tokens, ${lines.length} lines`);
  for (const r of rows) {
    const mbps = r.name.startsWith('load') ? '' : `  ${(bytes.length / 1e6 / (r.wall / 1e3)).toFixed(2)} MB/s wall, ` +
      `${(bytes.length / 1e6 / (r.cpuMs / 1e3)).toFixed(2)} MB/s cpu`;
    console.log(`${r.name.padEnd(22)} ${r.wall.toFixed(1).padStart(8)} ms wall ${r.cpuMs.toFixed(1).padStart(8)} ms cpu${mbps}`);
  }
})();
