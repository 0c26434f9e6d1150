#!/usr/bin/python3
"""Small datasets for the export tests (tests/CMakeLists.txt, "The ONNX export"), so that
training a few steps, evaluating and predicting take seconds on any model:

  OUT/fashion-small/   an IDX directory: the first 512 training and 500 test
                       images of Fashion-MNIST ($TROUPE_FASHION_MNIST_DIR, else
                       Debian's /usr/share/datasets/fashion-mnist)
  OUT/wordnet-small/   data.{adj,adv,noun,verb}: the first 300 synsets of each
                       of WordNet's files ($TROUPE_WORDNET_DIR, else
                       /usr/share/wordnet), for TROUPE_WORDNET_DIR
  OUT/houses.csv       600 rows of a seeded regression table: features of
                       very different scales (rooms, area, age), a float
                       price (--task regress --standardize)

Usage: make_data.py OUT
"""
import gzip, os, struct, sys

out = sys.argv[1]
fashion = os.environ.get("TROUPE_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
wordnet = os.environ.get("TROUPE_WORDNET_DIR", "/usr/share/wordnet")


def read(path):
    opener = gzip.open if os.path.exists(path + ".gz") else open
    with opener(path + ".gz" if os.path.exists(path + ".gz") else path, "rb") as f:
        return f.read()


def head_idx(data, count):
    """The IDX file of the first `count` items: the header with the new count, then their bytes."""
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    item = 1
    for d in shape[1:]:
        item *= d
    header = data[:4] + struct.pack(">I", count) + data[8:4 + 4 * dims]
    return header + data[4 + 4 * dims:4 + 4 * dims + count * item]


idx = os.path.join(out, "fashion-small")
os.makedirs(idx, exist_ok=True)
for stem, count in (("train-images-idx3-ubyte", 512), ("train-labels-idx1-ubyte", 512),
                    ("t10k-images-idx3-ubyte", 500), ("t10k-labels-idx1-ubyte", 500)):
    with open(os.path.join(idx, stem), "wb") as f:
        f.write(head_idx(read(os.path.join(fashion, stem)), count))

text = os.path.join(out, "wordnet-small")
os.makedirs(text, exist_ok=True)
for part in ("adj", "adv", "noun", "verb"):
    kept = []
    with open(os.path.join(wordnet, "data." + part), "rb") as f:
        for line in f:
            if line.startswith(b"  "):  # the licence header
                continue
            kept.append(line)
            if len(kept) == 300:
                break
    with open(os.path.join(text, "data." + part), "wb") as f:
        f.writelines(kept)
# A linear congruential generator, so the table is the same with any Python.
state = 12345


def uniform(low, high):
    global state
    state = (state * 6364136223846793005 + 1442695040888963407) % 2**64
    return low + (high - low) * (state >> 11) / 2**53


with open(os.path.join(out, "houses.csv"), "w") as f:
    f.write("rooms,area,age,price\n")
    for _ in range(600):
        rooms, area, age = int(uniform(1, 7)), uniform(30, 250), uniform(0, 80)
        price = 50 * rooms + 3 * area - 1.5 * age + uniform(-20, 20)
        f.write(f"{rooms},{area:.2f},{age:.1f},{price:.3f}\n")
print(f"make_data: {idx} (512 train, 500 test images), {text} (4 x 300 synsets), houses.csv (600 rows)")
