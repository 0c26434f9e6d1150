// onnxruntime (its npm package onnxruntime-node, CPU) runs an exported model
// on the inputs `troupe predict --inputs` wrote and compares its outputs with
// troupe's (tests/CMakeLists.txt, "The ONNX export"): the largest absolute difference
// must be at most 1e-4. The examples go in two batches of different sizes,
// so the batch dimension is checked to be dynamic.
//
// Usage: node ort_compare.js DIR   (DIR/model.onnx, DIR/inputs.npy, DIR/predictions.json)
// The package is looked for in $TROUPE_ONNXRUNTIME_NODE, else
// ~/.cache/troupe/onnxruntime-node (scripts/setup.sh installs it there);
// without it the script exits 77, ctest's skip.
"use strict";
const fs = require("fs");
const os = require("os");
const path = require("path");

const home = process.env.TROUPE_ONNXRUNTIME_NODE || path.join(os.homedir(), ".cache", "troupe", "onnxruntime-node");
let ort;
try {
  ort = require(path.join(home, "node_modules", "onnxruntime-node"));
} catch (e) {
  console.log(`SKIP: onnxruntime-node is not installed in ${home} (scripts/setup.sh installs it): ${e.message}`);
  process.exit(77);
}

// NumPy's .npy, version 1: the header's dict gives dtype and shape.
function readNpy(file) {
  const b = fs.readFileSync(file);
  const length = b.readUInt16LE(8);
  const header = b.toString("latin1", 10, 10 + length);
  const descr = /'descr': '([^']+)'/.exec(header)[1];
  const shape = /'shape': \(([^)]*)\)/.exec(header)[1].split(",").filter((s) => s.trim()).map(Number);
  const body = b.subarray(10 + length);
  const copy = new Uint8Array(body).buffer;  // aligned for the typed array
  const data = descr === "<i4" ? new Int32Array(copy) : new Float32Array(copy);
  return { type: descr === "<i4" ? "int32" : "float32", shape, data };
}

async function main() {
  const dir = process.argv[2];
  const x = readNpy(path.join(dir, "inputs.npy"));
  const expected = JSON.parse(fs.readFileSync(path.join(dir, "predictions.json"), "utf8"));
  const session = await ort.InferenceSession.create(path.join(dir, "model.onnx"));
  const n = x.shape[0];
  const row = x.data.length / n;
  const first = Math.max(1, Math.floor(n / 3));
  let worst = 0, where = "";
  let got = 0;
  for (const [start, end] of [[0, first], [first, n]]) {
    if (end <= start) continue;
    const input = new ort.Tensor(x.type, x.data.slice(start * row, end * row), [end - start, ...x.shape.slice(1)]);
    const result = await session.run({ input });
    const out = result.output.data;
    const per = out.length / (end - start);
    for (let e = start; e < end; ++e) {
      const want = expected.outputs[e];
      if (want.length !== per) throw new Error(`example ${e}: ${per} outputs, troupe has ${want.length}`);
      for (let k = 0; k < per; ++k) {
        const d = Math.abs(out[(e - start) * per + k] - want[k]);
        if (!(d <= worst)) { worst = d; where = `example ${e}, output ${k}`; }
      }
      ++got;
    }
  }
  if (got !== expected.examples) throw new Error(`${got} examples run, troupe predicted ${expected.examples}`);
  const ok = worst <= 1e-4;
  console.log(`${dir}: onnxruntime ${ort.env.versions.node} on ${got} examples: max |onnxruntime - troupe| = ` +
              `${worst.toExponential(3)} (${where})${ok ? "" : ", more than 1e-4"}`);
  process.exit(ok ? 0 : 1);
}

main().catch((e) => { console.error(`ort_compare: ${e.stack || e}`); process.exit(1); });
