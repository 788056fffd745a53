#!/usr/bin/env node
// ort_run.js: ONNX Runtime's CPU provider (onnxruntime-node, installed in bench/ort/ by
// bench/compare_ort) running an ONNX model the way bench/compare_ort compares it with strix:
// intra-op threads as many as strix's, one inter-op thread, every graph optimisation ('all'),
// sequential execution.
//
//   node bench/ort_run.js bench MODEL --shape 3,224,224 [--dtype float32] [--batch 16]
//                         [--runs 10] [--threads N]
//     A model with one input: random inputs in [0, 1) (token ids 0..9 for int64), the
//     latency of one example and the time of a batch of B, each the median of R runs after
//     one warm-up run, as `strix bench` times them; prints
//       result: batch=B runs=R latency_ms=L batch_ms=T
//   node bench/ort_run.js run MODEL --input [NAME=]FILE.npy ... --output DIR [--threads N]
//     Runs the inputs (.npy of float32, float64, int64 or int32; NAME defaults to the model's
//     inputs in order) and writes each output to DIR/NAME.npy (float32, or its own type).
'use strict';
const fs = require('fs');
const path = require('path');

function die(msg) {
    process.stderr.write(`ort_run.js: ${msg}\n`);
    process.exit(1);
}

let ort;
try {
    ort = require(path.join(__dirname, 'ort', 'node_modules', 'onnxruntime-node'));
} catch (e) {
    die(`onnxruntime-node is not installed in ${path.join(__dirname, 'ort')} ` +
        `(cd there and run: npm install --ignore-scripts): ${e.message}`);
}

// ---------------------------------------------------------------- .npy files

const NPY_TYPES = {
    '<f4': ['float32', Float32Array], '<f8': ['float64', Float64Array],
    '<i8': ['int64', BigInt64Array], '<i4': ['int32', Int32Array],
};

function npyRead(file) {
    const b = fs.readFileSync(file);
    if (b.length < 10 || b.toString('latin1', 0, 6) !== '\x93NUMPY') die(`${file}: not a .npy file`);
    const v1 = b[6] === 1, hlen = v1 ? b.readUInt16LE(8) : b.readUInt32LE(8);
    const start = (v1 ? 10 : 12) + hlen, h = b.toString('latin1', v1 ? 10 : 12, start);
    const descr = /'descr':\s*'([^']+)'/.exec(h), shape = /'shape':\s*\(([^)]*)\)/.exec(h);
    if (!descr || !shape || /'fortran_order':\s*True/.test(h)) die(`${file}: unsupported header ${h}`);
    const t = NPY_TYPES[descr[1]];
    if (!t) die(`${file}: element type ${descr[1]} (want <f4, <f8, <i8 or <i4)`);
    const dims = shape[1].split(',').map((s) => s.trim()).filter((s) => s).map(Number);
    const n = dims.reduce((a, d) => a * d, 1), data = new t[1](n);
    Buffer.from(data.buffer).set(b.subarray(start, start + n * t[1].BYTES_PER_ELEMENT));
    return new ort.Tensor(t[0], data, dims);
}

function npyWrite(file, tensor) {
    const descr = Object.keys(NPY_TYPES).find((k) => NPY_TYPES[k][0] === tensor.type);
    if (!descr) die(`${file}: output type ${tensor.type}`);
    const dims = tensor.dims.join(', ') + (tensor.dims.length === 1 ? ',' : '');
    let h = `{'descr': '${descr}', 'fortran_order': False, 'shape': (${dims}), }`;
    h += ' '.repeat(63 - ((10 + h.length) % 64)) + '\n';
    const head = Buffer.alloc(10);
    head.write('\x93NUMPY', 0, 'latin1');
    head[6] = 1;
    head[7] = 0;
    head.writeUInt16LE(h.length, 8);
    const d = tensor.data;
    fs.writeFileSync(file, Buffer.concat([head, Buffer.from(h, 'latin1'),
        Buffer.from(d.buffer, d.byteOffset, d.byteLength)]));
}

// ---------------------------------------------------------------- the commands

function parse(argv) {
    const o = { inputs: [], threads: 1, batch: 16, runs: 10, dtype: 'float32' };
    o.cmd = argv[0];
    o.model = argv[1];
    for (let i = 2; i < argv.length; i++) {
        const a = argv[i], v = argv[i + 1];
        if (v === undefined) die(`missing value for ${a}`);
        if (a === '--input') o.inputs.push(v);
        else if (a === '--output') o.output = v;
        else if (a === '--shape') o.shape = v.split(',').map(Number);
        else if (a === '--dtype') o.dtype = v;
        else if (['--threads', '--batch', '--runs'].includes(a)) {
            o[a.slice(2)] = Number(v);
            if (!Number.isInteger(o[a.slice(2)]) || o[a.slice(2)] < 1) die(`bad ${a} ${v}`);
        } else die(`unknown option ${a}`);
        i++;
    }
    if (!['bench', 'run'].includes(o.cmd) || !o.model)
        die('usage: ort_run.js bench|run MODEL ... (see the head of bench/ort_run.js)');
    return o;
}

function session(o) {
    return ort.InferenceSession.create(o.model, {
        executionProviders: ['cpu'], intraOpNumThreads: o.threads, interOpNumThreads: 1,
        graphOptimizationLevel: 'all', executionMode: 'sequential',
    });
}

function randomInput(dtype, dims) {
    const n = dims.reduce((a, d) => a * d, 1);
    if (dtype === 'int64')
        return new ort.Tensor('int64', BigInt64Array.from({ length: n }, () =>
            BigInt(Math.floor(Math.random() * 10))), dims);
    if (dtype !== 'float32') die(`--dtype ${dtype} (float32 or int64)`);
    return new ort.Tensor('float32', Float32Array.from({ length: n }, Math.random), dims);
}

async function medianMs(s, feeds, runs) {
    await s.run(feeds);
    const t = [];
    for (let r = 0; r < runs; r++) {
        const t0 = process.hrtime.bigint();
        await s.run(feeds);
        t.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
    t.sort((a, b) => a - b);
    return runs % 2 ? t[(runs - 1) / 2] : (t[runs / 2 - 1] + t[runs / 2]) / 2;
}

async function bench(o) {
    if (!o.shape) die('bench: no --shape (one example\'s, without the batch axis)');
    const s = await session(o);
    if (s.inputNames.length !== 1) die(`bench: ${o.model} has ${s.inputNames.length} inputs (one)`);
    const name = s.inputNames[0];
    const one = await medianMs(s, { [name]: randomInput(o.dtype, [1, ...o.shape]) }, o.runs);
    const all = await medianMs(s, { [name]: randomInput(o.dtype, [o.batch, ...o.shape]) }, o.runs);
    console.log(`result: batch=${o.batch} runs=${o.runs} latency_ms=${one.toFixed(3)} ` +
        `batch_ms=${all.toFixed(3)}`);
}

async function run(o) {
    if (!o.output) die('run: no --output DIR');
    const s = await session(o);
    const feeds = {};
    o.inputs.forEach((spec, k) => {
        const eq = spec.indexOf('=');
        const name = eq > 0 ? spec.slice(0, eq) : s.inputNames[k];
        if (!s.inputNames.includes(name)) die(`run: ${o.model} has no input ${name}`);
        feeds[name] = npyRead(eq > 0 ? spec.slice(eq + 1) : spec);
    });
    const missing = s.inputNames.filter((n) => !(n in feeds));
    if (missing.length) die(`run: no --input for ${missing.join(', ')}`);
    const out = await s.run(feeds);
    fs.mkdirSync(o.output, { recursive: true });
    for (const name of s.outputNames) {
        const file = path.join(o.output, `${name.replace(/[^A-Za-z0-9_.-]/g, '_')}.npy`);
        npyWrite(file, out[name]);
        console.log(`${file}: output '${name}' (${out[name].dims.join(', ')})`);
    }
}

const o = parse(process.argv.slice(2));
(o.cmd === 'bench' ? bench(o) : run(o)).catch((e) => die(e.message));
