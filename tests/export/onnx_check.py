#!/usr/bin/python3
"""Debian's python3-onnx checks an exported model (tests/CMakeLists.txt, "The ONNX export"):
onnx.checker.check_model with full_check (shape inference included), an
opset from 13 to 17, the input "input" and output "output" with a dynamic
batch dimension, and every initializer a node uses.

Usage: onnx_check.py MODEL.onnx...   Exit 77 (ctest's skip) without python3-onnx.
"""
import sys

try:
    import onnx
except ImportError:
    print("SKIP: python3-onnx is not installed (scripts/setup.sh installs it)")
    sys.exit(77)

for path in sys.argv[1:]:
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    opsets = {o.domain: o.version for o in model.opset_import}
    assert 13 <= opsets.get("", 0) <= 17, f"{path}: opset {opsets}"
    graph = model.graph
    assert [i.name for i in graph.input] == ["input"], f"{path}: inputs {[i.name for i in graph.input]}"
    assert [o.name for o in graph.output] == ["output"], f"{path}: outputs {[o.name for o in graph.output]}"
    for v in (graph.input[0], graph.output[0]):
        assert v.type.tensor_type.shape.dim[0].dim_param == "batch", f"{path}: {v.name} has no dynamic batch"
    used = {name for node in graph.node for name in node.input}
    unused = [t.name for t in graph.initializer if t.name not in used]
    assert not unused, f"{path}: initializers no node uses: {unused}"
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    shape = [d.dim_value or d.dim_param for d in inferred.graph.output[0].type.tensor_type.shape.dim]
    print(f"{path}: checked (opset {opsets['']}, {len(graph.node)} nodes, "
          f"{len(graph.initializer)} initializers, output {shape})")
