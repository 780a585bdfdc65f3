#!/usr/bin/env python3
"""Draws a log-log roofline chart from the JSON that `ridge roofline plot` / `ridge report` write.

usage: plot_roofline.py SPEC.json OUT_BASE   -> OUT_BASE.png and OUT_BASE.svg

SPEC: {"title": str,
       "roofs":  [{"chip", "chip_name", "dtype", "level", "peak_flops", "bandwidth"}],
       "points": [{"chip", "group", "label", "dtype", "intensity", "flops_per_s", "kind": "predicted"|"measured",
                   measured only: "num" (the report table's number), "cache", "above_roof"}]}
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

    def level_style(chip, level):
        # Two chips' outermost levels (hbm, dram) are both solid; the chip's colour tells them apart
        # in the legend, which names the chip with the level.
        return level_styles.get(level, "-")
    dtype_width = {"fp8": 2.4, "int8": 2.4, "bf16": 2.0, "fp16": 2.0, "tf32": 1.4, "fp32": 1.2, "fp64": 0.9, "fp4": 2.8}

    xs = [p["intensity"] for p in points if p.get("intensity")] + [r["peak_flops"] / r["bandwidth"] for r in roofs]
    xmin = 10 ** math.floor(math.log10(max(min(xs) / 4, 1e-3)))
    xmax = 10 ** math.ceil(math.log10(max(xs) * 4))

    fig, ax = plt.subplots(figsize=(12, 7.5))
    # Every dtype roof of every chip on its outermost level (the roof a model's weights see), one
    # line per distinct peak with the dtypes that share it in its label; inner cache levels only for
    # the chip's main compute dtypes (bf16, fp32), else the chart turns to spaghetti.
    outer = {}
    for r in roofs:
        outer.setdefault(r["chip"], r["level"])  # chip files list the outermost level first
    merged = {}
    for r in roofs:
        is_outer = r["level"] == outer[r["chip"]]
        if not is_outer and r["dtype"] not in ("bf16", "fp32"):
            continue
        key = (r["chip"], r["level"], r["peak_flops"], r["bandwidth"])
        if key not in merged:
            merged[key] = dict(r, dtypes=[])
        if r["dtype"] not in merged[key]["dtypes"]:
            merged[key]["dtypes"].append(r["dtype"])
    drawn = set()
    for (chip, level, peak, bw), r in merged.items():
        is_outer = level == outer[chip]
        drawn.add((chip, level))
        ridge = peak / bw
        x = [xmin, ridge, xmax]
        y = [xmin * bw, peak, peak]
        width = max(dtype_width.get(d, 1.5) for d in r["dtypes"])
        ax.plot(x, y, color=chip_colors[chip], linestyle=level_style(chip, level),
                linewidth=width, alpha=0.85 if is_outer else 0.5)
        if is_outer:
            rate = f"{peak / 1e12:.4g} TFLOP/s" if peak >= 1e12 else f"{peak / 1e9:.4g} GFLOP/s"
            ax.annotate(f'{chip} {"/".join(r["dtypes"])} {rate}', (xmax, peak), fontsize=7,
                        ha="right", va="bottom", color=chip_colors[chip])

    groups = []
    for p in points:
        if p["group"] not in groups:
            groups.append(p["group"])
    markers = ["o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h"]
    group_marker = {g: markers[i % len(markers)] for i, g in enumerate(groups)}
    # One scatter call per (group, colour, kind): one call per point is quadratic-slow at 10^5 points.
    batches = {}
    above = []
    for p in points:
        if not p.get("intensity") or not p.get("flops_per_s"):
            continue
        measured = p.get("kind") == "measured"
        color = "black" if measured else chip_colors.get(p["chip"], "gray")
        if measured and p.get("above_roof"):
            color = "red"
            above.append(p)
        xs_ys = batches.setdefault((p["group"], color, measured), ([], []))
        xs_ys[0].append(p["intensity"])
        xs_ys[1].append(p["flops_per_s"])
        if measured and p.get("num"):
            # The number matches the '#' column of the report's measured table.
            ax.annotate(str(p["num"]), (p["intensity"], p["flops_per_s"]), xytext=(4, 3), textcoords="offset points",
                        fontsize=7, color=color, zorder=4)
    for (group, color, measured), (bx, by) in batches.items():
        ax.scatter(bx, by, marker=group_marker[group], s=46 if measured else 30,
                   facecolors=color if measured else "none", edgecolors=color, linewidths=1.1, zorder=3)
    if above:
        fig.text(0.01, 0.005, "red: above its roof: the roof is wrong or the working set came from a faster level "
                 f"(points {', '.join(str(p.get('num', '?')) for p in above)})", fontsize=8, color="red",
                 ha="left", va="bottom")

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
    order = ["hbm", "dram", "l3", "l2", "l1"]
    for chip, level in sorted(drawn, key=lambda cl: (chips.index(cl[0]), order.index(cl[1]) if cl[1] in order else 9)):
        handles.append(Line2D([], [], color=chip_colors[chip], linestyle=level_style(chip, level), linewidth=1.6,
                              label=f"{chip}: {level} bandwidth roof"))
    handles += [Line2D([], [], color="gray", marker=group_marker[g], linestyle="none", markerfacecolor="none",
                       label=f"{g} (predicted)") for g in groups if any(
                           p["group"] == g and p.get("kind") != "measured" for p in points)]
    if any(p.get("kind") == "measured" for p in points):
        handles += [Line2D([], [], color="black", marker=group_marker[g], linestyle="none", label=f"{g} (measured)")
                    for g in groups if any(p["group"] == g and p.get("kind") == "measured" for p in points)]
    ax.legend(handles=handles, loc="upper left", fontsize=8, framealpha=0.9)
    fig.tight_layout(rect=(0, 0.03 if above else 0, 1, 1))
    base = sys.argv[2]
    fig.savefig(base + ".png", dpi=110)
    fig.savefig(base + ".svg")


if __name__ == "__main__":
    main()
