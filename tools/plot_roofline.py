#!/usr/bin/env python3
"""Draws a log-log roofline chart from the JSON that `ridge roofline plot` / `ridge report` write.

usage: plot_roofline.py SPEC.json OUT_BASE   -> OUT_BASE.png and OUT_BASE.svg

SPEC: {"title": str,
       "roofs":  [{"chip", "chip_name", "dtype", "level", "peak_flops", "bandwidth"}],
       "points": [{"chip", "group", "label", "dtype", "intensity", "flops_per_s", "kind": "predicted"|"measured"}]}
"""
import json
import math
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: plot_roofline.py SPEC.json OUT_BASE")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
    except ImportError:
        sys.exit("matplotlib is missing: install it (Debian: apt-get install python3-matplotlib; pip: pip install matplotlib)")

    with open(sys.argv[1]) as f:
        spec = json.load(f)
    roofs, points = spec.get("roofs", []), spec.get("points", [])
    if not roofs:
        sys.exit("the plot has no roofs (no chip given)")

    chips = []
    for r in roofs:
        if r["chip"] not in chips:
            chips.append(r["chip"])
    chip_colors = {c: plt.cm.tab10(i % 10) for i, c in enumerate(chips)}
    level_styles = {"hbm": "-", "dram": "-", "l3": "--", "l2": "-.", "l1": ":"}
    dtype_width = {"fp8": 2.4, "int8": 2.4, "bf16": 2.0, "fp16": 2.0, "tf32": 1.4, "fp32": 1.2, "fp64": 0.9, "fp4": 2.8}

    xs = [p["intensity"] for p in points if p.get("intensity")] + [r["peak_flops"] / r["bandwidth"] for r in roofs]
    xmin = 10 ** math.floor(math.log10(max(min(xs) / 4, 1e-3)))
    xmax = 10 ** math.ceil(math.log10(max(xs) * 4))

    fig, ax = plt.subplots(figsize=(12, 7.5))
    # Only the dtypes that matter for the points, plus each chip's best, keep the chart legible.
    used_dtypes = {p.get("dtype") for p in points if p.get("kind") == "predicted"}
    drawn = set()
    for r in roofs:
        is_outer = r["level"] in ("hbm", "dram")
        if r["dtype"] not in used_dtypes and not (is_outer and r["dtype"] in ("bf16", "fp32")):
            continue
        # Inner cache levels only for the chip's main compute dtype, else the chart turns to spaghetti.
        if not is_outer and r["dtype"] not in ("bf16",) and r["dtype"] != "fp32":
            continue
        key = (r["chip"], r["dtype"], r["level"])
        if key in drawn:
            continue
        drawn.add(key)
        ridge = r["peak_flops"] / r["bandwidth"]
        x = [xmin, ridge, xmax]
        y = [xmin * r["bandwidth"], r["peak_flops"], r["peak_flops"]]
        ax.plot(x, y, color=chip_colors[r["chip"]], linestyle=level_styles.get(r["level"], "-"),
                linewidth=dtype_width.get(r["dtype"], 1.5), alpha=0.85 if is_outer else 0.55)
        if is_outer:
            ax.annotate(f'{r["chip"]} {r["dtype"]} {r["level"]}', (xmax, r["peak_flops"]), fontsize=7,
                        ha="right", va="bottom", color=chip_colors[r["chip"]])

    groups = []
    for p in points:
        if p["group"] not in groups:
            groups.append(p["group"])
    markers = ["o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h"]
    group_marker = {g: markers[i % len(markers)] for i, g in enumerate(groups)}
    # One scatter call per (group, colour, kind): one call per point is quadratic-slow at 10^5 points.
    batches = {}
    for p in points:
        if not p.get("intensity") or not p.get("flops_per_s"):
            continue
        measured = p.get("kind") == "measured"
        color = "black" if measured else chip_colors.get(p["chip"], "gray")
        xs_ys = batches.setdefault((p["group"], color, measured), ([], []))
        xs_ys[0].append(p["intensity"])
        xs_ys[1].append(p["flops_per_s"])
    for (group, color, measured), (bx, by) in batches.items():
        ax.scatter(bx, by, marker=group_marker[group], s=46 if measured else 30,
                   facecolors=color if measured else "none", edgecolors=color, linewidths=1.1, zorder=3)

    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(xmin, xmax)
    ys = [r["peak_flops"] for r in roofs] + [p["flops_per_s"] for p in points if p.get("flops_per_s")]
    ax.set_ylim(10 ** math.floor(math.log10(min(ys) / 3)), 10 ** math.ceil(math.log10(max(ys) * 1.5)))
    ax.set_xlabel("arithmetic intensity (FLOP per byte of memory traffic)")
    ax.set_ylabel("attainable performance (FLOP/s)")
    ax.set_title(spec.get("title", "roofline"))
    ax.grid(True, which="major", alpha=0.3)
    ax.grid(True, which="minor", alpha=0.08)

    handles = [Line2D([], [], color=chip_colors[c], linewidth=2.5,
                      label=next(r["chip_name"] for r in roofs if r["chip"] == c)) for c in chips]
    levels = sorted({r[2] for r in drawn}, key=lambda l: ["hbm", "dram", "l3", "l2", "l1"].index(l))
    handles += [Line2D([], [], color="gray", linestyle=level_styles.get(l, "-"), label=f"roof: {l} bandwidth")
                for l in levels]
    handles += [Line2D([], [], color="gray", marker=group_marker[g], linestyle="none", markerfacecolor="none",
                       label=f"{g} (predicted)") for g in groups if any(
                           p["group"] == g and p.get("kind") != "measured" for p in points)]
    if any(p.get("kind") == "measured" for p in points):
        handles += [Line2D([], [], color="black", marker=group_marker[g], linestyle="none", label=f"{g} (measured)")
                    for g in groups if any(p["group"] == g and p.get("kind") == "measured" for p in points)]
    ax.legend(handles=handles, loc="upper left", fontsize=8, framealpha=0.9)
    fig.tight_layout()
    base = sys.argv[2]
    fig.savefig(base + ".png", dpi=110)
    fig.savefig(base + ".svg")


if __name__ == "__main__":
    main()
