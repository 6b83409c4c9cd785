#!/usr/bin/env node
// Derives the (unofficial) Gemma-4 test tokenizer from Google's Gemma-3 tokenizer.json by
// renaming the special tokens at their fixed ids (docs/gemma4.md §6).
// usage: node tools/make_gemma4_tokenizer.js gemma3-tokenizer.json out-gemma4-tokenizer.json
'use strict';
const fs = require('fs');
const [src, dst] = process.argv.slice(2);
if (!src || !dst) {
  console.error('usage: make_gemma4_tokenizer.js IN OUT');
  process.exit(2);
}
const RENAME = {
  46: '<|tool>', 47: '<tool|>', 48: '<|tool_call>', 49: '<tool_call|>', 50: '<|tool_response>',
  51: '<tool_response|>', 52: '<|"|>', 98: '<|think|>', 100: '<|channel>', 101: '<channel|>',
  105: '<|turn>', 106: '<turn|>', 255999: '<|image>', 256000: '<|audio>', 258880: '<|image|>',
  258881: '<|audio|>', 258882: '<image|>', 258883: '<audio|>', 258884: '<|video|>',
};
const t = JSON.parse(fs.readFileSync(src, 'utf8'));
const vocab = t.model.vocab;
const inv = {};
for (const [piece, id] of Object.entries(vocab)) inv[id] = piece;
for (const [id, name] of Object.entries(RENAME)) {
  delete vocab[inv[id]];
  vocab[name] = Number(id);
}
t.added_tokens = t.added_tokens.filter((a) => a.id < 262144);
for (const a of t.added_tokens) {
  if (RENAME[a.id] !== undefined) {
    a.content = RENAME[a.id];
    a.special = true;
  }
}
// Gemma-4 IT tokenizers do not add <bos> (the chat template writes it).
fs.writeFileSync(dst + '.tmp', JSON.stringify(t));
fs.renameSync(dst + '.tmp', dst);
