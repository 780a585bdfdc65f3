#!/usr/bin/env python3
"""Plots a `ridge train --json` log: loss against step, with the text's unigram entropy as the line a
model must fall below to have learned anything beyond letter frequencies.

    ridge train ... --json > log.jsonl
    python3 tools/plot_train.py log.jsonl -o loss.png [--unigram-nats 3.26] [--title ...]
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log", help="JSON lines written by `ridge train --json`")
    ap.add_argument("-o", "--out", required=True, help="output image (.png or .svg)")
    ap.add_argument("--unigram-nats", type=float, default=None,
                    help="unigram entropy of the data in nats/token (`ridge data info` prints it)")
    ap.add_argument("--title", default="ridge train")
    args = ap.parse_args()
    steps, loss, mean = [], [], []
    with open(args.log) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                j = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"plot_train: {args.log}:{n}: not a JSON line ({e.msg})")
            steps.append(j["step"])
            loss.append(j["loss"])
            mean.append(j.get("mean_loss", j["loss"]))
    if not steps:
        sys.exit(f"plot_train: {args.log} holds no logged steps")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, mean, color="C0", label="training loss (mean over the logging window)")
    if args.unigram_nats is not None:
        ax.axhline(args.unigram_nats, color="C3", linestyle="--",
                   label=f"unigram entropy of the text ({args.unigram_nats:.2f} nats)")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title(args.title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
