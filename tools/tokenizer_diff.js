#!/usr/bin/env node
// Differential test: g4's tokenizer against Hugging Face's own (npm `tokenizers`, the Rust core).
// Generates thousands of strings from a seeded PRNG (scripts, CJK, emoji and ZWJ sequences,
// combining marks, whitespace runs, control characters, special-token markers, 100 KB inputs),
// encodes them with both, decodes HF's ids (and random id sequences) with both, with and without
// skip_special. Every difference is printed and fails the run (exit 1). Missing assets: exit 77.
//
// usage: node tools/tokenizer_diff.js --g4 build/g4 [--assets DIR] [--count 5000] [--seed 1]
//                                     [--tokenizers gemma4,gemma3]
'use strict';
const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');

const args = { count: 5000, seed: 1, tokenizers: 'gemma4,gemma3' };
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
const root = path.resolve(__dirname, '..');
const assets = args.assets || process.env.G4_ASSETS || path.join(root, 'assets');
const skip = (why) => { console.log(`SKIP: ${why} (run tools/setup.sh)`); process.exit(77); };
if (!args.g4 || !fs.existsSync(args.g4)) { console.error('usage: tokenizer_diff.js --g4 PATH_TO_g4'); process.exit(2); }
let Tokenizer;
try {
  ({ Tokenizer } = require(path.join(assets, 'npm/node_modules/tokenizers')));
} catch (e) {
  skip(`HF tokenizers not found under ${assets}/npm`);
}

// mulberry32: small, seeded, reproducible.
function Rng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6D2B79F5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (n) => Math.floor(next() * n);
  const pick = (list) => list[int(list.length)];
  return { next, int, pick };
}

const RANGES = [
  [0x20, 0x7e], [0x20, 0x7e], [0x20, 0x7e], [0xa0, 0xff], [0x100, 0x17f], [0x180, 0x24f],
  [0x370, 0x3ff], [0x400, 0x4ff], [0x530, 0x58f], [0x590, 0x5ff], [0x600, 0x6ff], [0x900, 0x97f],
  [0x980, 0x9ff], [0xe00, 0xe7f], [0x10a0, 0x10ff], [0x1100, 0x11ff], [0x1200, 0x137f],
  [0x13a0, 0x13ff], [0x16a0, 0x16ff], [0x1780, 0x17ff], [0x1e00, 0x1eff], [0x2000, 0x206f],
  [0x20a0, 0x20cf], [0x2190, 0x21ff], [0x2200, 0x22ff], [0x2500, 0x257f], [0x2600, 0x27bf],
  [0x3000, 0x303f], [0x3040, 0x309f], [0x30a0, 0x30ff], [0x4e00, 0x9fff], [0x4e00, 0x9fff],
  [0xac00, 0xd7a3], [0xe000, 0xf8ff], [0xfb00, 0xfdff], [0xfe00, 0xfe0f], [0xff00, 0xffef],
  [0xfff0, 0xfffd], [0x10000, 0x1007f], [0x10330, 0x1034f], [0x1d400, 0x1d7ff],
  [0x1f300, 0x1faff], [0x1f300, 0x1faff], [0x20000, 0x2a6df], [0xe0000, 0xe007f], [0xf0000, 0xf00ff],
];
const WORDS = ('the of and to in is you that it he was for on are as with his they at be this have ' +
  'from or one had by word but not what all were we when your can said there use an each which she ' +
  'do how their if will up other about out many then them these so some her would make like him into ' +
  'time has look two more write go see number no way could people my than first water been call who ' +
  'oil its now find long down day did get come made may part Hello World Gemma tokenizer function ' +
  'return const int float std::vector<int> self.assertEqual async await café naïve résumé Zoë ' +
  'Straße Ωmega данные 数据 データ 데이터 ข้อมูล بيانات נתונים डेटा').split(' ');
const MARKERS = ['<|turn>', '<turn|>', '<bos>', '<eos>', '<pad>', '<unk>', '<mask>', '[multimodal]',
  '<start_of_turn>', '<end_of_turn>', '<|channel>', '<channel|>', '<|think|>', '<|tool_call>',
  '<tool_call|>', '<|tool>', '<tool|>', '<|tool_response>', '<tool_response|>', '<|"|>', '<|image|>',
  '<|audio|>', '<|video|>', '<|image>', '<image|>', '<start_of_image>', '<end_of_image>',
  '<image_soft_token>', '<unused0>', '<unused40>', '<unused99>', '<unused6241>', '<b>', '</b>',
  '<table>', '<tr>', '<h1>', '<code>', '<img>', '<bbox>', '<0x41>', '<0xZZ>', '<0x+A>', '<|tu', 'turn|>',
  '<bo', 's>', '<<bos>>', '<|<|turn>', '<', '>', '|', '\n', '\n\n\n', '\t\t', '▁', '▁▁', '▁▁▁', ' '];
const SPACES = [' ', '  ', '\t', '\n', '\r\n', '\r', '\u00a0', '\u3000', '\u2003', '\u200b', '\u000b',
  '\u000c', '\u0085', '\u2028', '\u202f', '\ufeff'];
const EMOJI = ['👨‍👩‍👧‍👦', '👩🏽‍💻', '🏳️‍🌈', '🇩🇪', '🇯🇵', '1️⃣', '❤️', '👍🏿', '🧑‍🤝‍🧑', '😀', '🙂', '🚀', '🌍',
  '\u200d', '\ufe0f', '\u{1f3fb}', '\u{1f1e6}', '🫠', '🥲'];

function Generator(seed) {
  const r = Rng(seed);
  const cp = () => {
    const [lo, hi] = r.pick(RANGES);
    let c = lo + r.int(hi - lo + 1);
    if (c >= 0xd800 && c <= 0xdfff) c = 0x41;  // no lone surrogates: HF gets UTF-8
    return String.fromCodePoint(c);
  };
  const combining = () => String.fromCodePoint(0x300 + r.int(0x70));
  const control = () => String.fromCodePoint(r.pick([r.int(0x20), 0x7f, 0x80 + r.int(0x20)]));
  const word = () => r.pick(WORDS);
  const run = (s, n) => s.repeat(n);
  const kinds = [
    () => { let s = ''; for (let i = r.int(30) + 1; i--;) s += cp(); return s; },
    () => { let s = ''; for (let i = r.int(12) + 1; i--;) { s += cp(); if (r.next() < 0.4) s += combining(); if (r.next() < 0.3) s += ' '; } return s; },
    () => { let s = ''; for (let i = r.int(15) + 1; i--;) s += (r.next() < 0.5 ? word() : r.pick(EMOJI)) + (r.next() < 0.6 ? ' ' : ''); return s; },
    () => { let s = ''; for (let i = r.int(10) + 1; i--;) s += word() + r.pick(SPACES).repeat(1 + r.int(r.next() < 0.2 ? 70 : 4)); return s; },
    () => { let s = ''; for (let i = r.int(12) + 1; i--;) s += (r.next() < 0.5 ? control() : word()); return s; },
    () => { let s = ''; for (let i = r.int(12) + 1; i--;) s += r.next() < 0.5 ? r.pick(MARKERS) : (r.next() < 0.5 ? word() : cp()); return s; },
    () => r.pick(['▁', '▁▁', '▁x', 'x▁', '▁ ▁', ' ▁', '▁\n', run('▁', 1 + r.int(40))]),
    () => { let s = ''; for (let i = r.int(8) + 1; i--;) s += run(r.pick(['\n', '\t', ' ', '\r\n', '\u3000']), 1 + r.int(80)) + (r.next() < 0.5 ? word() : ''); return s; },
    () => { let s = ''; for (let i = r.int(40) + 1; i--;) s += String.fromCodePoint(0x80 + r.int(0x80), r.next() < 0.3 ? 0xfffd : 0x61); return s; },
    () => { let s = ''; for (let i = r.int(20) + 1; i--;) s += r.pick(['    ', 'if (x) {', '}\n', 'return', ' ', '==', '->', '::', '//', '#', '"str"', "'c'", '\t', word(), String(r.int(100000)), '.', ',', ';']); return s; },
  ];
  const strings = [];
  return {
    make(count) {
      // Fixed edge cases first, then random ones.
      strings.push('', ' ', '▁', '▁▁', 'x▁y', '\n', '\r\n', '\t', '\u0000', ' '.repeat(1000),
        '\n'.repeat(500), '\t'.repeat(300), '▁'.repeat(300), '<bos>', '<|turn>user\nHi<turn|>',
        '<start_of_turn>user\nHi<end_of_turn>', 'a'.repeat(5000), '🚀'.repeat(200));
      // Long inputs: ~100 KB of mixed text, one with no spaces (one BPE word), one multilingual.
      let mixed = '';
      while (mixed.length < 100000) mixed += r.pick(kinds)() + r.pick(['\n', ' ', '. ', '\n\n']);
      strings.push(mixed);
      let noSpace = '';
      while (noSpace.length < 100000) noSpace += word() + cp();
      strings.push(noSpace.replace(/[ \n]/g, '_'));
      let multi = '';
      while (multi.length < 100000) multi += cp() + (r.next() < 0.1 ? ' ' : '');
      strings.push(multi);
      while (strings.length < count) strings.push(r.pick(kinds)());
      return strings;
    },
    randomIdSequences(count, vocab) {
      const seqs = [];
      const interesting = [0, 1, 2, 3, 46, 52, 98, 100, 101, 105, 106, 107, 137, 138, 168, 236743, 262143, 262144, 300000];
      for (let i = 0; i < count; ++i) {
        const n = 1 + r.int(30);
        const ids = [];
        for (let k = 0; k < n; ++k) {
          const x = r.next();
          if (x < 0.35) ids.push(238 + r.int(256));
          else if (x < 0.5) ids.push(238 + 0x80 + r.int(0x40));
          else if (x < 0.6) ids.push(238 + 0xe0 + r.int(0x20));
          else if (x < 0.75) ids.push(r.pick(interesting));
          else ids.push(r.int(vocab));
        }
        seqs.push(ids);
      }
      return seqs;
    },
  };
}

function runG4(argv, lines) {
  const result = spawnSync(args.g4, argv, { input: lines.join('\n') + '\n', maxBuffer: 1 << 30 });
  if (result.status !== 0) {
    console.error(`g4 ${argv.join(' ')} failed (${result.status}): ${result.stderr}`);
    process.exit(1);
  }
  const out = result.stdout.toString('utf8').split('\n');
  out.pop();
  if (out.length !== lines.length) {
    console.error(`g4 ${argv.join(' ')}: ${out.length} output lines for ${lines.length} inputs`);
    process.exit(1);
  }
  return out.map((line) => JSON.parse(line));
}

const show = (s) => { const j = JSON.stringify(s); return j.length > 160 ? j.slice(0, 160) + `... (${s.length} chars)` : j; };
const firstDiff = (a, b) => { let i = 0; while (i < a.length && i < b.length && a[i] === b[i]) ++i; return i; };

async function Check(name) {
  const file = path.join(assets, 'tokenizer', `${name}.json`);
  if (!fs.existsSync(file)) skip(`missing ${file}`);
  const hf = Tokenizer.fromFile(file);
  const gen = Generator(Number(args.seed) + (name === 'gemma3' ? 1000 : 0));
  const strings = gen.make(Number(args.count));
  const t0 = Date.now();
  const hfIds = [];
  for (const s of strings) hfIds.push(Array.from((await hf.encode(s, null, { addSpecialTokens: false })).getIds()));
  const t1 = Date.now();
  const g4Ids = runG4(['tokenize', '--tokenizer', file, '--jsonl'], strings.map((s) => JSON.stringify(s)));
  const t2 = Date.now();
  let failures = 0;
  for (let i = 0; i < strings.length; ++i) {
    const a = hfIds[i], b = g4Ids[i];
    if (a.length === b.length && a.every((x, k) => x === b[k])) continue;
    ++failures;
    const k = firstDiff(a, b);
    console.log(`[${name}] ENCODE DIFF #${i} ${show(strings[i])}\n  first difference at token ${k}:` +
      ` hf ${JSON.stringify(a.slice(k, k + 8))} g4 ${JSON.stringify(b.slice(k, k + 8))}`);
  }
  const vocab = hf.getVocabSize(true);
  const decodeInputs = hfIds.concat(gen.randomIdSequences(1000, vocab));
  let roundtrips = 0, decodes = 0;
  for (const skipSpecial of [false, true]) {
    const hfText = [];
    for (const ids of decodeInputs) hfText.push(await hf.decode(ids, skipSpecial));
    const g4Text = runG4(['detokenize', '--tokenizer', file, '--jsonl'].concat(skipSpecial ? ['--skip-special'] : []),
      decodeInputs.map((ids) => JSON.stringify(ids)));
    for (let i = 0; i < decodeInputs.length; ++i) {
      ++decodes;
      if (hfText[i] !== g4Text[i]) {
        ++failures;
        const k = firstDiff(hfText[i], g4Text[i]);
        console.log(`[${name}] DECODE DIFF (skip_special=${skipSpecial}) ids ${show(decodeInputs[i])}\n` +
          `  at char ${k}: hf ${show(hfText[i].slice(k, k + 20))} g4 ${show(g4Text[i].slice(k, k + 20))}`);
      }
      // decode(encode(s)) == s wherever the reference round-trips.
      if (!skipSpecial && i < strings.length && hfText[i] === strings[i]) {
        ++roundtrips;
        if (g4Text[i] !== strings[i]) {
          ++failures;
          console.log(`[${name}] ROUNDTRIP DIFF #${i} ${show(strings[i])}`);
        }
      }
    }
  }
  const bytes = strings.reduce((n, s) => n + Buffer.byteLength(s), 0);
  console.log(`[${name}] ${strings.length} strings (${(bytes / 1e6).toFixed(2)} MB), ${decodes} decodes, ` +
    `${roundtrips} exact round-trips: ${failures} differences (hf encode ${t1 - t0} ms, g4 tokenize ${t2 - t1} ms)`);
  return failures;
}

(async () => {
  let failures = 0;
  for (const name of args.tokenizers.split(',')) failures += await Check(name);
  console.log(failures ? `FAIL: ${failures} differences` : 'PASS: g4 matches Hugging Face tokenizers');
  process.exit(failures ? 1 : 0);
})();
