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
const { readCompact, int32s, table, writeCheckpoint } = require('./compact_form');

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

const manifest = JSON.parse(fs.readFileSync(path.join(src, 'manifest.json'), 'utf8'));
const config = JSON.parse(fs.readFileSync(path.join(src, 'config.json'), 'utf8'));
const V = config.text_config.vocab_size;
const Ha = config.text_config.hidden_size;
const NC = config.num_centroids;
if (V % NC !== 0) throw new Error('num_centroids must divide vocab_size');
const CS = V / NC;

const compact = readCompact(src, manifest);
const vocab = int32s(compact.vocab_ids, 'vocab_ids');
const used = int32s(compact.used_ordering, 'used_ordering');
if (used.length !== vocab.length) throw new Error('used_ordering and vocab_ids differ in length');

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
tensors['model.embed_tokens.weight'] = table(compact.embed_rows, compact.null_embed, V, Ha, vocab);
tensors['masked_embedding.centroids.weight'] = table(
  compact.centroid_rows, compact.null_centroid, NC, Ha, Array.from({ length: usedClusters }, (_, i) => i));
tensors['masked_embedding.token_ordering'] = { dtype: 'I64', shape: [V], data: ordering };

const written = writeCheckpoint('expand_assistant.js', out, tensors,
                                verify ? manifest.model_safetensors_sha256 : undefined);
fs.copyFileSync(path.join(src, 'config.json'), path.join(out, 'config.json'));
console.log(`expand_assistant.js: wrote ${out} (model.safetensors ${written.bytes} bytes, ${written.count} tensors, sha256 ${written.sha})`);
