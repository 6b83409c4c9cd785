// Tokenizes KJV verses with the Gemma-4 tokenizer (Hugging Face tokenizers, Node binding).
// usage: node tokenize.js TOKENIZER_JSON IN_JSON OUT_JSON
//   IN_JSON:  {"verses": [[ref, text], ...], "prompts": [text, ...]}
//   OUT_JSON: {"verses": [[ids...], ...], "prompts": [[ids...], ...], "joined_ok": bool}
//   or IN_JSON {"decode": [[ids...], ...]} -> OUT_JSON {"decoded": [text, ...]}
'use strict';
const fs = require('fs');
const path = require('path');
const tokPkg = process.env.G4_TOKENIZERS_NODE ||
  path.resolve(__dirname, '../../assets/npm/node_modules/tokenizers');
const { Tokenizer } = require(tokPkg);

async function main() {
  const [tokPath, inPath, outPath] = process.argv.slice(2);
  const tok = Tokenizer.fromFile(tokPath);
  const inp = JSON.parse(fs.readFileSync(inPath, 'utf8'));
  const enc = async (s) => Array.from((await tok.encode(s, null, { addSpecialTokens: false })).getIds());
  if (inp.decode) {  // {"decode": [[ids...], ...]} -> {"decoded": [text, ...]}
    const decoded = [];
    for (const ids of inp.decode) decoded.push(await tok.decode(ids, false));
    fs.writeFileSync(outPath, JSON.stringify({ decoded }));
    return;
  }
  const verses = [];
  for (const [, text] of inp.verses) verses.push(await enc(text));
  const prompts = [];
  for (const p of inp.prompts || []) prompts.push(await enc(p));
  // Check that joining verses with "\n" tokenizes as the concatenation (so training sequences
  // equal what the tokenizer gives for the running text).
  let joinedOk = true;
  for (let i = 0; i + 1 < verses.length; i += 97) {
    const both = await enc(inp.verses[i][1] + '\n' + inp.verses[i + 1][1]);
    const cat = verses[i].concat([107], verses[i + 1]);
    if (both.join(',') !== cat.join(',')) { joinedOk = false; console.error('join mismatch at', inp.verses[i][0]); }
  }
  fs.writeFileSync(outPath, JSON.stringify({ verses, prompts, joined_ok: joinedOk }));
}
main().catch((e) => { console.error(e); process.exit(1); });
