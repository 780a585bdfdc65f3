#!/usr/bin/env python3
"""Live bytes over time from a ridge memory snapshot, stacked by tag, with the peak marked.

Usage: plot_memory.py SNAPSHOT.json -o OUT.png   (called by `ridge memory plot`)
The replay here is independent of ridge's C++ one, so the plot also checks the snapshot.
"""
import argparse
import json
import sys


def replay(doc):
    live = {}  # address -> (bytes, tag)
    by_tag = {}
    for e in doc.get("baseline", []):
        live[e["address"]] = (e["bytes"], e["tag"])
        by_tag[e["tag"]] = by_tag.get(e["tag"], 0) + e["bytes"]
    times, states = [0.0], [dict(by_tag)]
    for e in doc["events"]:
        if e["action"] == "alloc":
            live[e["address"]] = (e["bytes"], e["tag"])
            by_tag[e["tag"]] = by_tag.get(e["tag"], 0) + e["bytes"]
        else:
            got = live.pop(e["address"], None)
            if got is not None:
                by_tag[got[1]] -= got[0]
        times.append(e["t_us"] / 1e6)
        states.append(dict(by_tag))
    end = doc.get("duration_us", times[-1] * 1e6) / 1e6
    if end > times[-1]:
        times.append(end)
        states.append(dict(by_tag))
    return times, states


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("snapshot")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--top", type=int, default=8, help="tags drawn separately; the rest are 'other'")
    args = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_memory.py: matplotlib is not installed (scripts/setup installs python3-matplotlib)")
    with open(args.snapshot) as f:
        doc = json.load(f)
    times, states = replay(doc)

    peak_of = {}
    for s in states:
        for tag, b in s.items():
            peak_of[tag] = max(peak_of.get(tag, 0), b)
    tags = sorted((t for t in peak_of if peak_of[t] > 0), key=lambda t: -peak_of[t])
    shown, rest = tags[: args.top], tags[args.top:]
    mib = 1024.0 * 1024.0
    series = [[s.get(t, 0) / mib for s in states] for t in shown]
    if rest:
        series.append([sum(s.get(t, 0) for t in rest) / mib for s in states])
    labels = shown + (["other (%d tags)" % len(rest)] if rest else [])
    totals = [sum(s.values()) / mib for s in states]
    ipeak = max(range(len(totals)), key=lambda i: totals[i]) if totals else 0

    fig, ax = plt.subplots(figsize=(10, 5))
    if series:
        ax.stackplot(times, *series, labels=labels, step="post", alpha=0.85)
    ax.step(times, totals, where="post", color="black", linewidth=0.8, label="total live")
    if totals:
        ax.axvline(times[ipeak], color="red", linestyle="--", linewidth=1)
        ax.annotate("peak %.1f MiB at %.3f s" % (totals[ipeak], times[ipeak]),
                    xy=(times[ipeak], totals[ipeak]), xytext=(10, -5), textcoords="offset points",
                    color="red", va="top")
    rss = doc.get("peak_rss_bytes", 0) / mib
    ax.set_title("ridge memory timeline: live bytes through ridge's allocator by tag"
                 + (" (process peak RSS %.0f MiB)" % rss if rss else ""))
    ax.set_xlabel("time since recording started (s)")
    ax.set_ylabel("live (MiB)")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)


if __name__ == "__main__":
    main()
