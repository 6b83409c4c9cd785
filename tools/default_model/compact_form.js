// Shared by expand.js and expand_assistant.js: reading the compact tracked safetensors shards,
// widening trained rows into full tables, and writing a checkpoint checked against its manifest.
// Node's standard library only.
'use strict';
const fs = require('fs');
const path = require('path');
const crypto = require('crypto');

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

// Every tensor of the manifest's shards, by name.
function readCompact(srcDir, manifest) {
  const compact = {};
  for (const s of manifest.shards) Object.assign(compact, readSafetensors(path.join(srcDir, s)));
  return compact;
}

function int32s(t, name) {
  if (!t || t.dtype !== 'I32') throw new Error(`${name} must be I32`);
  return new Int32Array(t.data.buffer.slice(t.data.byteOffset, t.data.byteOffset + t.data.length));
}

// A BF16 table [count, width]: `rows` [index.length, width] placed at rows index[k], `nullRow`
// [width] everywhere else.
function table(rows, nullRow, count, width, index) {
  if (rows.dtype !== 'BF16' || nullRow.dtype !== 'BF16') throw new Error('tables must be BF16');
  if (rows.shape[0] !== index.length || rows.shape[1] !== width || nullRow.shape[0] !== width)
    throw new Error('table shape mismatch');
  const rowBytes = width * 2;
  const buf = Buffer.alloc(count * rowBytes);
  buf.fill(nullRow.data);
  for (let k = 0; k < index.length; k++) {
    const r = index[k];
    if (r < 0 || r >= count) throw new Error(`bad row ${r}`);
    rows.data.copy(buf, r * rowBytes, k * rowBytes, (k + 1) * rowBytes);
  }
  return { dtype: 'BF16', shape: [count, width], data: buf };
}

// Writes OUT/model.safetensors (tensors sorted by name, metadata {"format":"pt"}) through a
// temporary file; with an expected sha256, a mismatch removes it and exits 1. Returns
// { bytes, count, sha }.
function writeCheckpoint(tool, out, tensors, expectedSha) {
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
  if (expectedSha && sha !== expectedSha) {
    fs.unlinkSync(tmp);
    console.error(`${tool}: sha256 ${sha} does not match manifest ${expectedSha}`);
    process.exit(1);
  }
  fs.renameSync(tmp, path.join(out, 'model.safetensors'));
  return { bytes: off + 8 + hjson.length, count: names.length, sha };
}

module.exports = { readCompact, int32s, table, writeCheckpoint };
