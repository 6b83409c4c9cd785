#!/usr/bin/env node
// Expands the compact tracked assistant drafter of the default model (models/default-assistant/)
// into a Hugging Face style gemma4_assistant checkpoint directory. Deterministic, Node's standard
// library only (the sibling of expand.js).
//
// usage: node tools/default_model/expand_assistant.js [--out DIR] [--no-verify]
//   DIR defaults to ${G4_ASSETS:-<repo>/assets}/models/default-assistant
// Writes DIR/config.json and DIR/model.safetensors (bf16 + the int64 token ordering; sha256
// checked against models/default-assistant/manifest.json).
//
// Compact form (weights-*.safetensors): vocab_ids I32 [Vc] (the ids the assistant was trained
// on), embed_rows BF16 [Vc, Ha] and null_embed BF16 [Ha] (every other id's row); used_ordering
// I32 [Vc] (the trained ids in cluster order: they fill the first clusters, then every other id
// follows in increasing order); centroid_rows BF16 [Nu, Ha] (the clusters that hold a trained id)
// and null_centroid BF16 [Ha] (every other cluster); every other tensor under its final name.
'use strict';
const fs = require('fs');
const path = require('path');
const crypto = require('crypto');

const root = path.resolve(__dirname, '..', '..');
const src = path.join(root, 'models', 'default-assistant');
const assets = process.env.G4_ASSETS || path.join(root, 'assets');
let out = path.join(assets, 'models', 'default-assistant');
let verify = true;
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  if (argv[i] === '--out') out = path.resolve(argv[++i]);
  else if (argv[i] === '--no-verify') verify = false;
  else { console.error(`expand_assistant.js: unknown argument ${argv[i]}`); process.exit(2); }
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

function int32s(t, name) {
  if (!t || t.dtype !== 'I32') throw new Error(`${name} must be I32`);
  return new Int32Array(t.data.buffer.slice(t.data.byteOffset, t.data.byteOffset + t.data.length));
}

const manifest = JSON.parse(fs.readFileSync(path.join(src, 'manifest.json'), 'utf8'));
const config = JSON.parse(fs.readFileSync(path.join(src, 'config.json'), 'utf8'));
const V = config.text_config.vocab_size;
const Ha = config.text_config.hidden_size;
const NC = config.num_centroids;
if (V % NC !== 0) throw new Error('num_centroids must divide vocab_size');
const CS = V / NC;

const compact = {};
for (const s of manifest.shards) Object.assign(compact, readSafetensors(path.join(src, s)));
const vocab = int32s(compact.vocab_ids, 'vocab_ids');
const used = int32s(compact.used_ordering, 'used_ordering');
if (used.length !== vocab.length) throw new Error('used_ordering and vocab_ids differ in length');

// Rows: `rows` [n, width] placed at `index[k]`, `nullRow` everywhere else.
function table(rows, nullRow, count, index) {
  if (rows.dtype !== 'BF16' || nullRow.dtype !== 'BF16') throw new Error('tables must be BF16');
  if (rows.shape[0] !== index.length || rows.shape[1] !== Ha || nullRow.shape[0] !== Ha)
    throw new Error('table shape mismatch');
  const rowBytes = Ha * 2;
  const buf = Buffer.alloc(count * rowBytes);
  buf.fill(nullRow.data);
  for (let k = 0; k < index.length; k++) {
    const r = index[k];
    if (r < 0 || r >= count) throw new Error(`bad row ${r}`);
    rows.data.copy(buf, r * rowBytes, k * rowBytes, (k + 1) * rowBytes);
  }
  return { dtype: 'BF16', shape: [count, Ha], data: buf };
}

// token_ordering: the trained ids in cluster order, then every other id increasing.
const isUsed = new Uint8Array(V);
for (const id of used) {
  if (id < 0 || id >= V || isUsed[id]) throw new Error(`bad or repeated id ${id} in used_ordering`);
  isUsed[id] = 1;
}
for (const id of vocab) if (!isUsed[id]) throw new Error(`vocab id ${id} missing from used_ordering`);
const ordering = Buffer.alloc(V * 8);
let k = 0;
for (const id of used) ordering.writeBigInt64LE(BigInt(id), 8 * k++);
for (let id = 0; id < V; id++) if (!isUsed[id]) ordering.writeBigInt64LE(BigInt(id), 8 * k++);
const usedClusters = Math.ceil(used.length / CS);
if (compact.centroid_rows.shape[0] !== usedClusters)
  throw new Error(`centroid_rows has ${compact.centroid_rows.shape[0]} rows, expected ${usedClusters}`);

const tensors = {};
for (const [name, t] of Object.entries(compact)) {
  if (name.startsWith('model.') || name.endsWith('_projection.weight')) tensors[name] = t;
}
tensors['model.embed_tokens.weight'] = table(compact.embed_rows, compact.null_embed, V, vocab);
tensors['masked_embedding.centroids.weight'] = table(
  compact.centroid_rows, compact.null_centroid, NC, Array.from({ length: usedClusters }, (_, i) => i));
tensors['masked_embedding.token_ordering'] = { dtype: 'I64', shape: [V], data: ordering };

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
if (verify && sha !== manifest.model_safetensors_sha256) {
  fs.unlinkSync(tmp);
  console.error(`expand_assistant.js: sha256 ${sha} does not match manifest ${manifest.model_safetensors_sha256}`);
  process.exit(1);
}
fs.renameSync(tmp, path.join(out, 'model.safetensors'));
fs.copyFileSync(path.join(src, 'config.json'), path.join(out, 'config.json'));
console.log(`expand_assistant.js: wrote ${out} (model.safetensors ${off + 8 + hjson.length} bytes, ${names.length} tensors, sha256 ${sha})`);
