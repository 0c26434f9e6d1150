#!/usr/bin/python3
"""troupe's `resnet` in PyTorch: the anchor's model (../shared/anchors/
torch_resnet.py, imported, not copied) takes the weights and the BatchNorm
running statistics from troupe's ONNX export (python3-onnx's numpy_helper),
and must give troupe's logits (max abs difference <= 1e-4, against `troupe
predict`) and troupe's test accuracy (within 0.1 point, against `troupe
eval`) on the same examples. That checks the export's initializers against
an independent implementation of the network, layer for layer.

The export's nodes come in troupe's graph order, which is the order of the
anchor's modules: the stem's convolution and BatchNorm, then in each block
c1, b1, c2, b2 and the shortcut's convolution and BatchNorm; the Dense head
(Gemm, kernel [in, out]) is the anchor's fc (weight [out, in]).

Usage: torch_resnet_check.py DIR
  DIR/model.onnx, DIR/predictions_all.json, DIR/inputs_all.npy, DIR/eval.txt
  (tests/export/prepare.sh ... full). The anchors' folder is
  $TROUPE_ANCHORS_DIR, else ../shared/anchors beside the checkout.
Exit 77 (ctest's skip) without python3-torch, python3-onnx or the anchors.
"""
import json, os, re, sys

here = os.path.dirname(os.path.abspath(__file__))
anchors = os.environ.get("TROUPE_ANCHORS_DIR", os.path.join(here, "..", "..", "..", "shared", "anchors"))
try:
    import numpy as np
    import onnx
    from onnx import numpy_helper
    import torch
except ImportError as e:
    print(f"SKIP: {e.name} is not installed (Debian python3-onnx, which scripts/setup.sh installs, and "
          "python3-torch, which it does not)")
    sys.exit(77)
if not os.path.exists(os.path.join(anchors, "torch_resnet.py")):
    print(f"SKIP: no torch_resnet.py in {anchors} (set TROUPE_ANCHORS_DIR)")
    sys.exit(77)
sys.path.insert(0, anchors)
import torch_resnet  # noqa: E402  (the anchor: its ResNet class)

torch.set_num_threads(1)
d = sys.argv[1]
model = onnx.load(os.path.join(d, "model.onnx"))
weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
attrs = lambda node: {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
convs = [n for n in model.graph.node if n.op_type == "Conv"]
norms = [n for n in model.graph.node if n.op_type == "BatchNormalization"]
gemms = [n for n in model.graph.node if n.op_type == "Gemm"]

net = torch_resnet.ResNet()
net.eval()
t_convs = [m for m in net.modules() if isinstance(m, torch.nn.Conv2d)]
t_norms = [m for m in net.modules() if isinstance(m, torch.nn.BatchNorm2d)]
assert len(convs) == len(t_convs) and len(norms) == len(t_norms) and len(gemms) == 1, \
    f"the export has {len(convs)} Conv, {len(norms)} BatchNormalization, {len(gemms)} Gemm nodes; " \
    f"the anchor {len(t_convs)} Conv2d, {len(t_norms)} BatchNorm2d, 1 Linear"


def put(param, value, what):
    value = torch.from_numpy(np.array(value, dtype=np.float32))  # a writable copy
    assert tuple(param.shape) == tuple(value.shape), f"{what}: anchor {tuple(param.shape)}, export {tuple(value.shape)}"
    param.data.copy_(value)


with torch.no_grad():
    for node, conv in zip(convs, t_convs):
        a = attrs(node)
        assert list(a["strides"]) == list(conv.stride) and list(a["pads"]) == list(conv.padding) * 2, \
            f"{node.name}: strides {a['strides']} pads {a['pads']}, anchor {conv.stride} {conv.padding}"
        assert len(node.input) == 2 and conv.bias is None, f"{node.name}: a bias"
        put(conv.weight, weights[node.input[1]], node.name)
    for node, bn in zip(norms, t_norms):
        assert abs(attrs(node)["epsilon"] - bn.eps) < 1e-9, f"{node.name}: epsilon {attrs(node)['epsilon']}"
        for param, name in zip((bn.weight, bn.bias, bn.running_mean, bn.running_var), node.input[1:]):
            put(param, weights[name], name)
    put(net.fc.weight, weights[gemms[0].input[1]].T, gemms[0].name)
    put(net.fc.bias, weights[gemms[0].input[2]], gemms[0].name)

    x = np.load(os.path.join(d, "inputs_all.npy"))
    expected = json.load(open(os.path.join(d, "predictions_all.json")))
    logits = net(torch.from_numpy(x)).numpy()

want = np.array(expected["outputs"], dtype=np.float32).reshape(expected["shape"])
labels = np.array(expected["labels"])
worst = float(np.abs(logits - want).max())
accuracy = float((logits.argmax(1) == labels).mean())
text = open(os.path.join(d, "eval.txt")).read()
troupe_accuracy = float(re.search(r"accuracy ([0-9.]+)", text).group(1))
print(f"{d}: the anchor's ResNet on {len(x)} examples: max |torch - troupe| = {worst:.3e}; "
      f"accuracy torch {accuracy:.4f}, troupe eval {troupe_accuracy:.4f}")
ok = worst <= 1e-4 and abs(accuracy - troupe_accuracy) <= 0.001 and len(x) == expected["examples"]
sys.exit(0 if ok else 1)
