#!/usr/bin/env node
// Expands the compact tracked default model (models/default/) into a full Hugging Face style
// Gemma-4 checkpoint directory. Deterministic, no dependencies beyond Node's standard library.
//
// usage: node tools/default_model/expand.js [--out DIR] [--tokenizer FILE] [--no-verify]
//   DIR defaults to ${G4_ASSETS:-<repo>/assets}/models/default
//   FILE defaults to ${G4_ASSETS:-<repo>/assets}/tokenizer/gemma4.json
// Writes DIR/config.json, DIR/generation_config.json, DIR/tokenizer.json and
// DIR/model.safetensors (bf16; sha256 checked against models/default/manifest.json).
//
// Compact form (weights-*.safetensors): vocab_ids I32 [Vc] (the token ids that were trained),
// embed_rows BF16 [Vc, H], ple_rows BF16 [Vc, L*P], null_embed BF16 [H], null_ple BF16 [L*P]
// (the rows every other id of the 262,144 gets), and every other tensor under its final name.
'use strict';
const fs = require('fs');
const path = require('path');
const crypto = require('crypto');

const root = path.resolve(__dirname, '..', '..');
const src = path.join(root, 'models', 'default');
const assets = process.env.G4_ASSETS || path.join(root, 'assets');
let out = path.join(assets, 'models', 'default');
let tokenizer = path.join(assets, 'tokenizer', 'gemma4.json');
let verify = true;
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  if (argv[i] === '--out') out = path.resolve(argv[++i]);
  else if (argv[i] === '--tokenizer') tokenizer = path.resolve(argv[++i]);
  else if (argv[i] === '--no-verify') verify = false;
  else { console.error(`expand.js: unknown argument ${argv[i]}`); process.exit(2); }
}

function readSafetensors(file) {
  const buf = fs.readFileSync(file);
  const n = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8'));
  delete header.__metadata__;
  const t = {};
  for (const [name, info] of Object.entries(header)) {
    const [a, b] = info.data_offsets;
    t[name] = { dtype: info.dtype, shape: info.shape, data: buf.subarray(8 + n + a, 8 + n + b) };
  }
  return t;
}

const manifest = JSON.parse(fs.readFileSync(path.join(src, 'manifest.json'), 'utf8'));
const config = JSON.parse(fs.readFileSync(path.join(src, 'config.json'), 'utf8'));
const tc = config.text_config;
const V = tc.vocab_size;
const H = tc.hidden_size;
const LP = tc.num_hidden_layers * tc.hidden_size_per_layer_input;
if (tc.vocab_size_per_layer_input !== V) throw new Error('vocab_size_per_layer_input != vocab_size');

const compact = {};
for (const s of manifest.shards) Object.assign(compact, readSafetensors(path.join(src, s)));
const ids = compact.vocab_ids;
if (ids.dtype !== 'I32') throw new Error('vocab_ids must be I32');
const vocab = new Int32Array(ids.data.buffer.slice(ids.data.byteOffset, ids.data.byteOffset + ids.data.length));

function table(rows, nullRow, width) {
  if (rows.dtype !== 'BF16' || nullRow.dtype !== 'BF16') throw new Error('tables must be BF16');
  if (rows.shape[0] !== vocab.length || rows.shape[1] !== width || nullRow.shape[0] !== width)
    throw new Error('table shape mismatch');
  const rowBytes = width * 2;
  const buf = Buffer.alloc(V * rowBytes);
  buf.fill(nullRow.data);
  for (let k = 0; k < vocab.length; k++) {
    const id = vocab[k];
    if (id < 0 || id >= V) throw new Error(`bad vocab id ${id}`);
    rows.data.copy(buf, id * rowBytes, k * rowBytes, (k + 1) * rowBytes);
  }
  return { dtype: 'BF16', shape: [V, width], data: buf };
}

const P = 'model.language_model.';
const tensors = {};
for (const [name, t] of Object.entries(compact)) {
  if (name.startsWith(P)) tensors[name] = t;
}
tensors[P + 'embed_tokens.weight'] = table(compact.embed_rows, compact.null_embed, H);
tensors[P + 'embed_tokens_per_layer.weight'] = table(compact.ple_rows, compact.null_ple, LP);

const names = Object.keys(tensors).sort();
const header = {};
let off = 0;
for (const n of names) {
  const t = tensors[n];
  header[n] = { dtype: t.dtype, shape: t.shape, data_offsets: [off, off + t.data.length] };
  off += t.data.length;
}
header.__metadata__ = { format: 'pt' };
let hjson = Buffer.from(JSON.stringify(header), 'utf8');
const pad = (8 - (hjson.length % 8)) % 8;
hjson = Buffer.concat([hjson, Buffer.alloc(pad, 0x20)]);
const len = Buffer.alloc(8);
len.writeBigUInt64LE(BigInt(hjson.length));

fs.mkdirSync(out, { recursive: true });
const tmp = path.join(out, 'model.safetensors.tmp');
const fd = fs.openSync(tmp, 'w');
const hash = crypto.createHash('sha256');
for (const b of [len, hjson, ...names.map((n) => tensors[n].data)]) {
  fs.writeSync(fd, b);
  hash.update(b);
}
fs.closeSync(fd);
const sha = hash.digest('hex');
if (verify && manifest.model_safetensors_sha256 && sha !== manifest.model_safetensors_sha256) {
  fs.unlinkSync(tmp);
  console.error(`expand.js: sha256 ${sha} does not match manifest ${manifest.model_safetensors_sha256}`);
  process.exit(1);
}
fs.renameSync(tmp, path.join(out, 'model.safetensors'));
fs.copyFileSync(path.join(src, 'config.json'), path.join(out, 'config.json'));
fs.copyFileSync(path.join(src, 'generation_config.json'), path.join(out, 'generation_config.json'));
fs.copyFileSync(tokenizer, path.join(out, 'tokenizer.json'));
console.log(`expand.js: wrote ${out} (model.safetensors ${off + 8 + hjson.length} bytes, ${names.length} tensors, sha256 ${sha})`);
