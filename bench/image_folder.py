#!/usr/bin/env python3
"""Writes the first N Fashion-MNIST training images as a Keras-layout image
folder, DIR/<class>/NNNNN.png (8-bit grey PNGs, 28x28), for the load-time
figure of docs/BENCHMARKS.md ("Image folders") and for trying
`--data images:DIR` on real images. Standard library only.

    bench/image_folder.py 10000 /tmp/fm-png [IDX_DIR]
"""
import gzip
import os
import struct
import sys
import zlib

CLASSES = ["T-shirt_top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle_boot"]


def png(width, height, rows):
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    raw = b"".join(b"\0" + row for row in rows)  # filter type 0 on every row
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit grey
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    count, out = int(sys.argv[1]), sys.argv[2]
    idx = sys.argv[3] if len(sys.argv) == 4 else os.environ.get("TROUPE_FASHION_MNIST_DIR",
                                                                   "/usr/share/datasets/fashion-mnist")
    with gzip.open(os.path.join(idx, "train-images-idx3-ubyte.gz")) as f:
        _, n, rows, cols = struct.unpack(">IIII", f.read(16))
        pixels = f.read(n * rows * cols)
    with gzip.open(os.path.join(idx, "train-labels-idx1-ubyte.gz")) as f:
        f.read(8)
        labels = f.read(n)
    for name in CLASSES:
        os.makedirs(os.path.join(out, name), exist_ok=True)
    for i in range(min(count, n)):
        image = pixels[i * rows * cols:(i + 1) * rows * cols]
        with open(os.path.join(out, CLASSES[labels[i]], "%05d.png" % i), "wb") as f:
            f.write(png(cols, rows, [image[r * cols:(r + 1) * cols] for r in range(rows)]))


if __name__ == "__main__":
    main()
