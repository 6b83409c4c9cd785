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
const { readCompact, int32s, table, writeCheckpoint } = require('./compact_form');

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

const manifest = JSON.parse(fs.readFileSync(path.join(src, 'manifest.json'), 'utf8'));
const config = JSON.parse(fs.readFileSync(path.join(src, 'config.json'), 'utf8'));
const tc = config.text_config;
const V = tc.vocab_size;
const H = tc.hidden_size;
const LP = tc.num_hidden_layers * tc.hidden_size_per_layer_input;
if (tc.vocab_size_per_layer_input !== V) throw new Error('vocab_size_per_layer_input != vocab_size');

const compact = readCompact(src, manifest);
const vocab = int32s(compact.vocab_ids, 'vocab_ids');

const P = 'model.language_model.';
const tensors = {};
for (const [name, t] of Object.entries(compact)) {
  if (name.startsWith(P)) tensors[name] = t;
}
tensors[P + 'embed_tokens.weight'] = table(compact.embed_rows, compact.null_embed, V, H, vocab);
tensors[P + 'embed_tokens_per_layer.weight'] = table(compact.ple_rows, compact.null_ple, V, LP, vocab);

const written = writeCheckpoint('expand.js', out, tensors,
                                verify ? manifest.model_safetensors_sha256 : undefined);
fs.copyFileSync(path.join(src, 'config.json'), path.join(out, 'config.json'));
fs.copyFileSync(path.join(src, 'generation_config.json'), path.join(out, 'generation_config.json'));
fs.copyFileSync(tokenizer, path.join(out, 'tokenizer.json'));
console.log(`expand.js: wrote ${out} (model.safetensors ${written.bytes} bytes, ${written.count} tensors, sha256 ${written.sha})`);
