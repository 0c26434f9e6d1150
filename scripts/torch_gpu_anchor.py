#!/usr/bin/env python3
"""PyTorch on one GPU, on the model and data troupe trains in scripts/gpu-check.sh.

Usage: torch_gpu_anchor.py DATA_DIR MODEL EPOCHS BATCH [--tf32]

The CPU anchor (shared/anchors/torch_anchor.py) on a GPU: the seed's cnn
(Conv2D 32 3x3, ReLU, MaxPool 2, Flatten, Dense 64 ReLU, Dense 10) or the
mlp, Fashion-MNIST from DATA_DIR's IDX files, Adam lr 1e-3 (eps 1e-8),
pixels in [0, 1], the same per-epoch shuffling scheme (a fresh permutation,
full batches only). The whole dataset is put on the GPU once, as a user
training MNIST-sized data on a GPU would, so the figure is PyTorch's compute
rate, not a data loader's. FP32 throughout, as troupe computes (cuBLAS and
cuDNN without TF32); --tf32 allows TF32 tensor cores (PyTorch's default for
convolutions) for comparison.

Prints one line per epoch and a RESULT line:
  RESULT torch-gpu train cnn batch=64 samples_per_s=... test_acc=... device=NVIDIA H100 ...
"""
import gzip
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        b = f.read()
    nd = struct.unpack(">I", b[:4])[0] & 0xFF
    dims = struct.unpack(">" + "I" * nd, b[4:4 + 4 * nd])
    return np.frombuffer(b, dtype=np.uint8, offset=4 + 4 * nd).reshape(dims)


def find(folder, stem):
    for name in (stem + ".gz", stem):
        if os.path.exists(os.path.join(folder, name)):
            return os.path.join(folder, name)
    raise SystemExit(f"torch_gpu_anchor: {stem}[.gz] not found in {folder}")


def data(folder, device):
    xtr = idx(find(folder, "train-images-idx3-ubyte")).astype(np.float32) / 255.0
    ytr = idx(find(folder, "train-labels-idx1-ubyte")).astype(np.int64)
    xte = idx(find(folder, "t10k-images-idx3-ubyte")).astype(np.float32) / 255.0
    yte = idx(find(folder, "t10k-labels-idx1-ubyte")).astype(np.int64)
    t = lambda a: torch.from_numpy(a).to(device)
    return t(xtr).unsqueeze(1), t(ytr), t(xte).unsqueeze(1), t(yte)


def model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                             nn.Linear(128, 10))
    if name == "cnn":
        return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(13 * 13 * 32, 64), nn.ReLU(), nn.Linear(64, 10))
    raise SystemExit(f"torch_gpu_anchor: unknown model {name} (cnn, mlp)")


def evaluate(m, xte, yte):
    m.eval()
    with torch.no_grad():
        correct = sum((m(xte[i:i + 1000]).argmax(1) == yte[i:i + 1000]).sum().item() for i in range(0, len(xte), 1000))
    m.train()
    return correct / len(xte)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 4:
        raise SystemExit(__doc__)
    folder, name, epochs, batch = args[0], args[1], int(args[2]), int(args[3])
    tf32 = "--tf32" in sys.argv
    if not torch.cuda.is_available():
        raise SystemExit("torch_gpu_anchor: torch.cuda.is_available() is False")
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    device = torch.device("cuda:0")
    xtr, ytr, xte, yte = data(folder, device)
    n = len(xtr)
    # One warm-up step on a throw-away model (CUDA loads its kernels, cuDNN
    # sets up), not counted; then the real model from seed 0.
    warm = model(name).to(device)
    loss = F.cross_entropy(warm(xtr[:batch]), ytr[:batch])
    loss.backward()
    torch.manual_seed(0)
    m = model(name).to(device)
    opt = torch.optim.Adam(m.parameters(), 1e-3, eps=1e-8)
    torch.cuda.synchronize()
    t_all, seen = 0.0, 0
    for ep in range(epochs):
        perm = torch.randperm(n, device=device)
        t0 = time.perf_counter()
        for i in range(0, n - batch + 1, batch):
            j = perm[i:i + batch]
            loss = F.cross_entropy(m(xtr[j]), ytr[j])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            seen += batch
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        t_all += dt
        print(f"epoch {ep + 1} {(n // batch) * batch / dt:.0f} samples/s loss {loss.item():.4f} "
              f"test_acc {evaluate(m, xte, yte):.4f}", flush=True)
    print(f"RESULT torch-gpu train {name} batch={batch} samples_per_s={seen / t_all:.0f} "
          f"test_acc={evaluate(m, xte, yte):.4f} tf32={int(tf32)} torch={torch.__version__} "
          f"device={torch.cuda.get_device_name(0).replace(' ', '_')}", flush=True)


if __name__ == "__main__":
    main()
