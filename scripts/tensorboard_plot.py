#!/usr/bin/env python3
"""Plot scalars from TensorBoard event files, without TensorBoard: what
TensorBoard's Scalars tab would show, drawn headless with gnuplot.

  scripts/tensorboard_plot.py OUT.png TAG RUN_DIR [RUN_DIR ...] [--x step|time] [--title T]

Each RUN_DIR holds events.out.tfevents.* files (troupe's --tensorboard or
troupe::TensorBoard); one curve per run, named after its folder. --x time
(the default) plots against seconds since the run's first event, like
TensorBoard's "relative" axis; --x step against the global step. Prints
each run's last value of TAG.

An independent reader of the format (no troupe code): TFRecord framing,
every length and record checked against its masked CRC-32C, Event and
Summary protos decoded field by field. Standard library only.
"""
import glob
import os
import struct
import subprocess
import sys
import tempfile


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def varint(buf, i):
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7


def fields(buf):
    """(field number, wire type, value) of a protobuf message."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(buf, i)
        elif wire == 1:
            value, i = buf[i:i + 8], i + 8
        elif wire == 2:
            n, i = varint(buf, i)
            value, i = buf[i:i + n], i + n
        elif wire == 5:
            value, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire}")
        yield number, wire, value


def records(path):
    with open(path, "rb") as f:
        data = f.read()
    i = 0
    while i < len(data):
        if i + 12 > len(data):
            raise ValueError(f"{path}: a truncated record header at byte {i}")
        header = data[i:i + 8]
        (length,) = struct.unpack("<Q", header)
        (crc,) = struct.unpack("<I", data[i + 8:i + 12])
        if crc != masked(crc32c(header)):
            raise ValueError(f"{path}: the length CRC of the record at byte {i} is wrong")
        body = data[i + 12:i + 12 + length]
        (crc,) = struct.unpack("<I", data[i + 12 + length:i + 16 + length])
        if len(body) != length or crc != masked(crc32c(body)):
            raise ValueError(f"{path}: the data CRC of the record at byte {i} is wrong")
        yield body
        i += 16 + length


def scalars(run_dir, tag):
    """[(wall time, step, value)] of `tag` in every event file of run_dir."""
    out = []
    files = sorted(glob.glob(os.path.join(run_dir, "events.out.tfevents.*")))
    if not files:
        raise ValueError(f"{run_dir}: no events.out.tfevents.* file")
    for path in files:
        for body in records(path):
            wall, step, summary = 0.0, 0, None
            for number, wire, value in fields(body):
                if number == 1 and wire == 1:
                    (wall,) = struct.unpack("<d", value)
                elif number == 2 and wire == 0:
                    step = value
                elif number == 5 and wire == 2:
                    summary = value
            if summary is None:
                continue
            for number, wire, value in fields(summary):
                if number != 1 or wire != 2:
                    continue
                name, simple = None, None
                for n, w, v in fields(value):
                    if n == 1 and w == 2:
                        name = v.decode()
                    elif n == 2 and w == 5:
                        (simple,) = struct.unpack("<f", v)
                if name == tag and simple is not None:
                    out.append((wall, step, simple))
    return out


def main(argv):
    args, x, title = [], "time", None
    i = 1
    while i < len(argv):
        if argv[i] == "--x" and i + 1 < len(argv) and argv[i + 1] in ("time", "step"):
            x, i = argv[i + 1], i + 2
        elif argv[i] == "--title" and i + 1 < len(argv):
            title, i = argv[i + 1], i + 2
        else:
            args.append(argv[i])
            i += 1
    if len(args) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    png, tag, runs = args[0], args[1], args[2:]
    with tempfile.TemporaryDirectory() as tmp:
        plots = []
        for run in runs:
            try:
                points = scalars(run, tag)
            except (OSError, ValueError) as e:
                print(f"tensorboard_plot.py: {e}", file=sys.stderr)
                return 1
            if not points:
                print(f"tensorboard_plot.py: {run}: no scalar '{tag}'", file=sys.stderr)
                return 1
            points.sort()
            t0 = points[0][0]
            name = os.path.basename(os.path.normpath(run))
            data = os.path.join(tmp, name + ".dat")
            with open(data, "w") as f:
                for wall, step, value in points:
                    f.write(f"{wall - t0 if x == 'time' else step} {value}\n")
            plots.append(f"'{data}' using 1:2 with linespoints pt 7 ps 0.5 title '{name}'")
            print(f"{name}: {len(points)} points of {tag}, the last {points[-1][2]:.4f} at step {points[-1][1]}")
        script = "\n".join([
            "set terminal pngcairo size 900,540 font 'sans,10'",
            f"set output '{png}'",
            "set termoption noenhanced",  # run names with underscores stay as written
            f"set title '{title or tag}'",
            "set xlabel '" + ("seconds since the first event of the run (TensorBoard: relative)" if x == "time" else "step") + "'",
            f"set ylabel '{tag}'",
            "set key bottom right",
            "set grid",
            "plot " + ", \\\n  ".join(plots),
        ])
        gp = os.path.join(tmp, "plot.gp")
        for terminal in ("pngcairo", "png"):
            with open(gp, "w") as f:
                f.write(script.replace("pngcairo", terminal) + "\n")
            r = subprocess.run(["gnuplot", gp], capture_output=True, text=True)
            if r.returncode == 0:
                break
        if r.returncode != 0:
            print(f"tensorboard_plot.py: gnuplot failed: {r.stderr.strip()}", file=sys.stderr)
            return 1
    print(f"{png}: {tag} of {len(runs)} run(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
