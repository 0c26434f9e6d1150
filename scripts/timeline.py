#!/usr/bin/env python3
"""troupe timelines (--timeline): merge the files of a job's nodes, and draw a
window of one as a PNG with gnuplot (headless: no browser needed).

  scripts/timeline.py merge OUT.json NODE1.json NODE2.json ...
      One trace with every node's process (each file keeps its pid and
      names); open OUT.json in ui.perfetto.dev or chrome://tracing.

  scripts/timeline.py plot TRACE.json OUT.png [--steps A:B] [--title T]
      One row per replica (and one for the coordinator's instants), one box
      per span, coloured by phase, for the steps A..B (default: the first 3
      steps in the file), time in milliseconds from the window's start.
      Prints, per phase, its median share of a step: where the time goes.

Standard library only; gnuplot (Debian's gnuplot-nox) for `plot`.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

PHASES = ["data wait", "forward", "backward", "all-reduce", "push", "pull", "optimizer", "grant wait"]
COLOURS = {"data wait": "#bbbbbb", "forward": "#4e79a7", "backward": "#f28e2b", "all-reduce": "#e15759",
           "push": "#76b7b2", "pull": "#59a14f", "optimizer": "#edc948", "grant wait": "#eeeeee"}


def fail(message):
    print(f"timeline.py: {message}", file=sys.stderr)
    sys.exit(2)


def load(path):
    try:
        with open(path) as f:
            trace = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{path}: {e}")
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        fail(f"{path}: not a trace-event file (no traceEvents list)")
    return trace


def merge(out, inputs):
    events, processes = [], []
    for path in inputs:
        trace = load(path)
        events.extend(trace["traceEvents"])
        processes.append(trace.get("otherData", {}).get("troupe_process", path))
    merged = {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"merged": processes}}
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(merged, f)
    os.replace(tmp, out)
    print(f"{out}: {len(events)} events of {len(inputs)} node(s): {', '.join(processes)}")


def plot(path, png, steps=None, title=None):
    trace = load(path)
    names, spans, instants = {}, [], []
    for e in trace["traceEvents"]:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            names.setdefault(("p", e["pid"]), e["args"]["name"])
        elif e.get("ph") == "M" and e.get("name") == "thread_name":
            names[(e["pid"], e["tid"])] = e["args"]["name"]
        elif e.get("ph") == "X":
            spans.append(e)
        elif e.get("ph") == "i":
            instants.append(e)
    if not spans:
        fail(f"{path}: no spans (was the job's step window empty?)")
    all_steps = sorted({e["args"]["step"] for e in spans})
    if steps:
        a, b = steps
    else:
        a, b = all_steps[0], all_steps[min(2, len(all_steps) - 1)]
    chosen = [e for e in spans if a <= e["args"]["step"] <= b]
    if not chosen:
        fail(f"{path}: no spans in steps {a}..{b} (the file has steps {all_steps[0]}..{all_steps[-1]})")
    t0 = min(e["ts"] for e in chosen)
    t1 = max(e["ts"] + e["dur"] for e in chosen)
    rows = sorted({(e["pid"], e["tid"]) for e in chosen})
    label = {r: f'{names.get(("p", r[0]), r[0])}: {names.get(r, r[1])}' for r in rows}
    with tempfile.TemporaryDirectory() as tmp:
        data = {}  # a file per phase (gnuplot skips empty blocks of one file)
        for n, phase in enumerate(PHASES):
            data[phase] = os.path.join(tmp, f"phase{n}.dat")
            with open(data[phase], "w") as f:
                for e in chosen:
                    if e["name"] != phase:
                        continue
                    y = rows.index((e["pid"], e["tid"]))
                    x0, x1 = (e["ts"] - t0) / 1000.0, (e["ts"] + e["dur"] - t0) / 1000.0
                    f.write(f"{x0} {x1} {y - 0.35} {y + 0.35}\n")
        ytics = ", ".join(f'"{label[r]}" {i}' for i, r in enumerate(rows))
        used = [p for p in PHASES if any(e["name"] == p for e in chosen)]
        plots = []
        for p in used:
            plots.append(f"'{data[p]}' using 1:3:1:2:3:4 with boxxyerror fs solid 0.9 noborder "
                         f"lc rgb '{COLOURS[p]}' title '{p}'")
        lines = []
        for e in instants:
            x = (e["ts"] - t0) / 1000.0
            if 0 <= x <= (t1 - t0) / 1000.0:
                lines.append(f"set arrow from {x}, graph 0 to {x}, graph 1 nohead lc rgb 'black' dt 2")
        script = "\n".join([
            "set terminal pngcairo size 1400,%d font 'sans,10'" % (160 + 60 * len(rows)),
            f"set output '{png}'",
            f"set title '{title or os.path.basename(path)}: steps {a} to {b}'",
            "set xlabel 'milliseconds'",
            f"set ytics ({ytics})",
            f"set yrange [-0.8:{len(rows) - 0.2}]",
            "set key outside right top",
            "set grid xtics",
            *lines,
            "plot " + ", \\\n  ".join(plots),
        ])
        gp = os.path.join(tmp, "timeline.gp")
        with open(gp, "w") as f:
            f.write(script + "\n")
        r = subprocess.run(["gnuplot", gp], capture_output=True, text=True)
        if r.returncode != 0 and "pngcairo" in r.stderr:
            with open(gp, "w") as f:
                f.write(script.replace("pngcairo", "png") + "\n")
            r = subprocess.run(["gnuplot", gp], capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"gnuplot failed: {r.stderr.strip()}")
    # Where the time goes: each phase's median share of a replica's step.
    by_step = {}
    for e in chosen:
        key = (e["pid"], e["tid"], e["args"]["step"])
        by_step.setdefault(key, {}).setdefault(e["name"], 0.0)
        by_step[key][e["name"]] += e["dur"]
    print(f"{png}: {len(rows)} replica(s), steps {a} to {b}, {(t1 - t0) / 1000.0:.1f} ms")
    for p in used:
        shares = [s.get(p, 0.0) / sum(s.values()) for s in by_step.values() if sum(s.values()) > 0]
        times = [s[p] / 1000.0 for s in by_step.values() if p in s]
        print(f"  {p:<11} median {statistics.median(times):8.3f} ms, {100 * statistics.median(shares):5.1f}% of a step")


def main(argv):
    if len(argv) >= 4 and argv[1] == "merge":
        merge(argv[2], argv[3:])
    elif len(argv) >= 4 and argv[1] == "plot":
        steps, title, rest = None, None, argv[4:]
        while rest:
            if rest[0] == "--steps" and len(rest) > 1:
                try:
                    a, b = (int(x) for x in rest[1].split(":"))
                except ValueError:
                    fail(f"--steps '{rest[1]}': want A:B")
                steps, rest = (a, b), rest[2:]
            elif rest[0] == "--title" and len(rest) > 1:
                title, rest = rest[1], rest[2:]
            else:
                fail(f"unknown argument {rest[0]}")
        plot(argv[2], argv[3], steps, title)
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main(sys.argv)
