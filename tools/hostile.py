#!/usr/bin/env python3
"""The hostile harness: tries every option of every `ridge` command as a hostile user would.

Run it before resolving an issue that adds a command or an option (docs/contract.md):

    python3 tools/hostile.py                      # every command, every attack, build/release/ridge
    python3 tools/hostile.py --commands roofline,hw --json > run.json
    python3 tools/hostile.py --attacks cross,env -j1 --commands data   # some families, one worker
    python3 tools/hostile.py --count              # the runs per command and family, running none

It reads the commands, their subcommands and their options from `ridge --help` and
`ridge CMD [SUB] --help` (nothing here lists options by hand, so it cannot go stale), then runs
the attack families (--attacks, default all):

  sweep   one option at a time, with hostile values:
          numbers  empty, negative, zero, huge (99999999999999999999), octal-looking (010), nan, inf, -inf,
                   1e400, a wrong type ('abc'), trailing junk ('4x'), and more (see NUMBER_VALUES)
          paths    an input of the same command (an output naming an input, in several spellings), a
                   directory, a FIFO, a dangling symlink, a read-only file, a name longer than NAME_MAX, a
                   path in a missing folder, an empty file, a file of garbage
  cross   every output option (-o, --checkpoint, --trace, --memory, ...) pointed at every file the
          command reads, as given, ./x, sub/../x, absolute, a symlink and a hard link, with and without
          --force (a folder output also at the folder an input lies in). What a command reads is derived
          from its arguments (BASE and INPUT_BASES) by a rule per kind of input (derive_inputs): an option
          whose help speaks of a file and does not write one names an input; a folder (a tokenizer) brings
          every file in it, a safetensors file brings the tokenizer folder its metadata records
          (__metadata__ -> tokenizer -> path) and every file in that. Each input must be byte-identical
          afterwards and each tokenizer folder must still load (`ridge data encode --tokenizer DIR`).
  stdout  stdout on /dev/full for every command that prints (its base run, --json, without an output
          that defaults to stdout, --help): exit 2 with one 'ridge:' line, never 0.
  jit     RIDGE_JIT=1 RIDGE_ISA=avx2 with a RIDGE_JIT_CXX that hangs (answers --version then sleeps; leaves
          a child holding the output pipes, also in a session of its own; hangs on --version) on
          `generate` with several prompts and on `jit list`: done within twice the compile deadline
          (compile_timeout_s, include/ridge/jit.hpp), never a deadline per kernel.
  deep    every JSON input (and each JSON file of a tokenizer folder; a checkpoint's metadata config,
          tokenizer record, header and a tensor's shape) nested --deep-depth (300,000) deep: exit 2.
  huge    sizes under an address-space limit (prlimit --as): every integer option that sizes something
          (not a count of repetitions) at 1e8, 1e12, 2^62, 2^63-1 and every --set axis at 1e12, 2^62;
          the issue's cases (generate --context 1e8 --max-tokens 9.9e7, --max-tokens 2^63-1, --context
          2^62, train --vocab 1e12, --context 2^62) and a checkpoint config of 2^62 must be refused
          quickly (exit 2, one line naming the option); a config key of 1e6 (num_layers 1000000) and a
          text input of one 1 GiB pre-token (sparse NUL bytes) must not blow the memory (train-bpe must
          refuse it). Peak RSS is each run's own (wait4).
  env     every knob docs/core.md lists (RIDGE_ISA, RIDGE_GEMM_*, RIDGE_JIT, OMP_NUM_THREADS, ...) at 0, -1,
          junk, 1e3, 20 digits, '2,junk' on every command, and more values, calibrations and the path
          variables (RIDGE_HOME, RIDGE_JIT_CXX, ...) on ENV_FULL: exit 2 with one 'ridge:' line naming
          the variable, or exit 0 for an accepted form (empty, 0 for a 0/1 switch) with no foreign line.

and judges each run against the contract (one line on stderr starting 'ridge:', exit 2, no file
lost, no hang, no signal). The hand-written tables are BASE and INPUT_BASES (the arguments that make a
command run quickly, and the other kinds of input it can read) and the attacks' values.

Breaks, by cause:
  exit-code        exit status not 0 or 2 (1 is 'internal error' or 'out of memory')
  signal           killed by a signal (SIGSEGV, SIGABRT, SIGBUS, SIGKILL from the OOM killer ...)
  hang             still running after --timeout seconds (jit: after twice the compile deadline)
  stderr           exit 2, but stderr is not exactly one line starting with 'ridge:'; or (env) exit 0
                   with a line that is not ridge's (libgomp's complaint)
  internal-error   'internal error' anywhere in stdout or stderr
  input-changed    an input file changed or removed (compared byte for byte)
  accepted         exit 0 for a value that must be refused: nan, inf, empty, junk, a wrong type,
                   1e400 for a number; a negative number; a huge integer; octal 010 read as 8;
                   a directory, a missing file or a name longer than NAME_MAX where a file is read
                   or written (the output written nowhere); an output onto an input (cross); JSON
                   nested 300,000 deep (deep); a size past memory (huge); a bad knob (env)
  unnamed-flag     exit 2, but the line does not name the option (or variable) the user typed
  tokenizer-broken a tokenizer folder the run read no longer loads (cross)
  stdout-lost      exit 0 although stdout was /dev/full: the output is lost and nobody is told (stdout)
  memory           peak RSS above --huge-rss-mib, or 'out of memory' under the address-space limit:
                   a size not refused before allocating (huge)
  slow             answered, but after the time allowed (huge: --huge-seconds; jit: twice the deadline)
  spelling         one value spelled two ways answered two ways: '+1' not as '1', '010' not as '10' (a
                   knob: '016' not as '16'), and on an option that takes reals '1e1' not as '10'; one
                   parser reads every number (docs/contract.md), so a spelling means the same everywhere

Standard library only. Two workers at most by default (the machine has two cores).
"""

import argparse
import concurrent.futures
import datetime
import hashlib
import json
import os
import random
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time

HUGE = "99999999999999999999"

# (kind, value) tried on every option that takes a value.
NUMBER_VALUES = [
    ("empty", ""),
    ("negative", "-1"),
    ("zero", "0"),
    ("huge", HUGE),
    ("octal", "010"),
    ("nan", "nan"),
    ("inf", "inf"),
    ("-inf", "-inf"),
    ("1e400", "1e400"),
    ("wrong-type", "abc"),
    ("trailing-junk", "4x"),
    ("hex", "0x10"),
    ("negative-huge", "-" + HUGE),
    ("fraction", "1.5"),
    ("space", " 1"),
    ("plus", "+1"),
    ("exponent", "1e1"),
    ("int64-max+1", "9223372036854775808"),
    ("uint32-max+1", "4294967296"),
    ("NaN", "NaN"),
    ("Infinity", "Infinity"),
    ("list", "1,2"),
    ("long", "9" * 400),
]
# Values that tell what an option takes (a number? an integer?) and with which octal is compared.
CALIBRATION = [("one", "1"), ("two", "2"), ("eight", "8"), ("ten", "10")]
# Exit 0 for these on an option that takes a number is a break.
# (' 1' and '1,2' are run but not judged: a leading space is harmless, a list is the syntax of some.)
NOT_A_NUMBER = {"empty", "nan", "inf", "-inf", "1e400", "wrong-type", "trailing-junk", "hex", "NaN", "Infinity",
                "long"}
NOT_AN_INTEGER = {"huge", "negative-huge", "fraction", "int64-max+1", "exponent"}
# One value spelled two ways, which every option that takes a number answers alike (exit 0 for both or
# for neither): a sign, a leading zero (decimal, never octal) and, where reals are taken, an exponent.
SAME_VALUE = {"plus": "one", "octal": "ten"}
SAME_VALUE_REAL = {"exponent": "ten"}

NAME_MAX = os.pathconf("/", "PC_NAME_MAX") if hasattr(os, "pathconf") else 255

# What makes each command run quickly. {text}, {tokens}, {vocab}, {merges}, {snapshot}, {chip}, {grid} name input
# files made in each case's folder; {out} a fresh output name there. A command absent here runs
# with no base arguments. A key is the command path; the first matching prefix wins.
BASE = {
    "train": ["--size", "tiny", "--steps", "2", "--context", "16", "--batch", "2", "--d-model", "32", "--d-ff", "64",
              "--layers", "1", "--heads", "2", "--text", "{text}", "--log-every", "1", "--threads", "1"],
    "data train-bpe": ["{text}", "--vocab-size", "260", "-o", "{out}", "--threads", "1"],
    "data encode": ["{text}", "-o", "{out}"],
    "data decode": ["{tokens}", "--tokenizer", "{vocab}", "--merges", "{merges}", "-o", "{out}"],
    "data info": ["{tokens}"],
    "bench stream": ["--quick", "--no-progress", "--grid-file", "{grid}", "--iters", "1", "--warmup", "0"],
    "bench gemm-dense": ["--quick", "--no-progress", "--grid-file", "{grid}", "--iters", "1", "--warmup", "0"],
    "bench moe": ["--quick", "--no-progress", "--grid-file", "{grid}", "--iters", "1", "--warmup", "0"],
    "bench gemm": ["--quick", "--no-progress", "--grid-file", "{grid}", "--shapes", "{shapes}", "--iters", "1",
                   "--warmup", "0"],
    "bench attention": ["--quick", "--no-progress", "--no-torch", "--no-math", "--grid-file", "{grid}", "--iters", "1",
                        "--warmup", "0"],
    "bench model": ["--quick", "--no-progress", "--no-torch", "--grid-file", "{grid}", "--iters", "1", "--warmup", "0"],
    "bench ddp": ["--quick", "--no-progress", "--grid-file", "{grid}", "--iters", "1", "--warmup", "0"],
    "bench allreduce": ["--quick", "--no-progress", "--grid-file", "{grid}", "--iters", "1", "--warmup", "0"],
    "bench trace-overhead": ["--quick", "--no-progress", "--grid-file", "{grid}", "--iters", "1", "--warmup", "0"],
    "probe": ["--quick", "--threads", "1", "--max-seconds", "0.1", "--max-bytes", "1MiB", "-o", "{out}"],
    "report": ["--this", "{chip}", "--no-measure", "--out", "{out}"],
    "hw show": ["{chip}"],
    "memory show": ["{snapshot}"],
    "memory plot": ["{snapshot}", "-o", "{out}.png"],
    "roofline plot": ["--hw", "{chip}", "--out", "{out}"],
    "roofline model": ["--hw", "{chip}"],
    "roofline ddp": ["--hw", "{chip}"],
    "roofline": ["--hw", "{chip}"],
    "generate": ["--size", "tiny", "--vocab", "256", "--context", "64", "--prompt", "hi", "--max-tokens", "4",
                 "--threads", "1"],
    "bench decode": ["--quick", "--no-progress", "--no-llama", "--no-torch", "--size", "tiny", "--steps", "1",
                     "--grid-file", "{grid}"],
    "bench tokenizer": ["--quick", "--no-progress", "--no-hf", "--no-python-ref", "--text", "{text}", "--grid-file",
                        "{grid}", "--iters", "1", "--warmup", "0"],
    "bench jit": ["--quick", "--no-progress", "--grid-file", "{grid}", "--iters", "1", "--warmup", "0"],
}
# The tiny model of train's BASE, and the size of the tokenizer the fixtures train (the checkpoint's vocab).
TINY_TRAIN = ["--size", "tiny", "--context", "16", "--batch", "2", "--d-model", "32", "--d-ff", "64", "--layers", "1",
              "--heads", "2", "--threads", "1"]
TOKENIZER_VOCAB = 270
# More ways to run a command, for the attacks that need every kind of input it reads (a tokenizer
# folder, a checkpoint that records one, a prompt file): what it reads is derived from these
# arguments (derive_inputs), never listed. {tokdir} is a tokenizer folder, {ckpt} a checkpoint of
# `ridge train` that records the folder {tokrec}, {prompt} a short text file.
INPUT_BASES = {
    "train": [TINY_TRAIN + ["--steps", "2", "--log-every", "1", "--text", "{text}", "--tokenizer", "{tokdir}"],
              TINY_TRAIN + ["--steps", "4", "--log-every", "1", "--data", "{tokens}", "--resume", "{ckpt}",
                            "--vocab", str(TOKENIZER_VOCAB)]],
    "generate": [["--checkpoint", "{ckpt}", "--prompt-file", "{prompt}", "--max-tokens", "4", "--threads", "1"],
                 ["--checkpoint", "{ckpt}", "--tokenizer", "{tokrec}", "--prompt", "hi", "--max-tokens", "4",
                  "--threads", "1"]],
    "data encode": [["{text}", "--tokenizer", "{tokdir}", "-o", "{out}"],
                    ["{text}", "--tokenizer", "{vocab}", "--merges", "{merges}", "-o", "{out}"]],
    "data decode": [["{tokens}", "--tokenizer", "{tokdir}", "-o", "{out}"]],
    "data info": [["{tokens}", "--tokenizer", "{tokdir}"]],
    # Training text inside a folder whose name the output folder can take.
    "data train-bpe": [["{tokdir}/vocab.json", "--vocab-size", "300", "-o", "{out}", "--threads", "1"]],
    # Measured rows (JSON lines of a benchmark) placed on the chart.
    "report": [["--this", "{chip}", "--no-measure", "--out", "{out}", "--results", "{results}"]],
    "roofline plot": [["--hw", "{chip}", "--out", "{out}", "--results", "{results}"]],
}
# Commands whose ordinary runs take longer than --timeout (bench model --predict fits efficiencies
# first, ~50 s): seconds allowed to each of their cases.
TIMEOUTS = {"bench model": 120.0, "bench jit": 60.0}

# The sweep of each benchmark's --grid-file: the smallest case that still runs.
GRIDS = {
    "bench stream": {"n": ["4K"], "kernel": ["copy"]},
    "bench gemm-dense": {"m": [16], "n": [16], "k": [16], "dtype": ["fp32"], "peer": [0]},
    "bench moe": {"experts": [4], "top_k": [2], "tokens": [64], "d_model": [32], "d_expert": [16], "dtype": ["fp32"],
                  "pass": ["forward"], "peer": [0]},
    "bench gemm": {"set": ["dense"], "dtype": ["fp32"], "peer": [0]},
    "bench attention": {"seq": [16], "head_dim": [16], "batch": [1], "heads": [1], "dtype": ["fp32"],
                        "pass": ["forward"], "causal": [0]},
    "bench model": {"size": ["tiny"], "context": [16], "batch": [1], "precision": ["fp32"], "pass": ["forward"],
                    "d_model": [32], "d_ff": [64], "layers": [1], "heads": [2]},
    "bench ddp": {"size": ["tiny"], "context": [16], "batch": [2], "mode": ["single"], "d_model": [32], "d_ff": [64],
                  "layers": [1], "heads": [2], "vocab": [256]},
    "bench allreduce": {"size": ["4K"], "op": ["allreduce"]},
    "bench trace-overhead": {"calls": [100], "kind": ["range"], "mode": ["off"]},
    "bench decode": {"weights": ["bf16"], "phase": ["decode"], "batch": [1], "context": [16]},
    "bench tokenizer": {"mb": [1], "vocab": [300]},
    "bench jit": {"phase": ["shape"], "dtype": ["fp32"], "size": ["small"], "op": ["out"], "m": [5],
                  "repeats": [1]},
}
GEMM_SHAPES = {"dense": [{"name": "tiny", "m": 16, "n": 16, "k": 128}]}

TEXT = ("It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
        "foolishness. ") * 40


# ---------------------------------------------------------------------------------------------- help


class Option:
    def __init__(self, names, typ, default, multi, required, lo, hi, desc, positional):
        self.names = names          # ['-o', '--output'] or ['chip'] for a positional
        self.typ = typ              # 'INT', 'UINT', 'FLOAT', 'TEXT', ... or None for a flag
        self.default = default
        self.multi = multi
        self.required = required
        self.lo, self.hi = lo, hi   # a range the help states, as text
        self.desc = desc
        self.positional = positional

    @property
    def name(self):
        longs = [n for n in self.names if n.startswith("--")]
        return (longs or self.names)[0]

    @property
    def is_flag(self):
        return self.typ is None and not self.positional

    def is_path(self):
        """A file name: a text option whose help speaks of a file, a path or writing."""
        if self.typ != "TEXT" or self.name in ("--python",):
            return False
        words = r"\b(file|files|FILE|path|snapshot|JSON|checkpoint|folder|directory|image)\b"
        return bool(re.search(words, self.desc)) or self.is_output()

    def is_output(self):
        if self.typ != "TEXT":
            return False
        if re.search(r"\b(write|writes|written)\b", self.desc.lower()):
            return True
        return self.name in ("--out", "--output", "-o") or "output image" in self.desc

    def to_json(self):
        return {"names": self.names, "type": self.typ, "default": self.default, "path": self.is_path(),
                "output": self.is_output(), "flag": self.is_flag, "positional": self.positional}


def parse_help(text):
    """Returns (description, subcommands [(name, desc)], options [Option])."""
    subs, options = [], []
    section = None
    last = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line.startswith(" "):
            s = line.strip().rstrip(":")
            section = s if line.rstrip().endswith(":") else None
            last = None
            continue
        if section == "Subcommands":
            m = re.match(r"^  (\S+)\s{2,}(.*)$", line)
            if m:
                subs.append((m.group(1), m.group(2)))
            continue
        if section not in ("Options", "Positionals"):
            continue
        cont = re.match(r"^\s{10,}(\S.*)$", line)
        if cont and last is not None and (len(line) - len(line.lstrip())) > 10:
            last.desc = (last.desc + " " + cont.group(1)).strip()
            continue
        m = re.match(r"^  (\S.*?)(?:\s{2,}(\S.*))?$", line)
        if not m:
            continue
        head, desc = m.group(1), m.group(2) or ""
        toks = head.split()
        names = toks[0].split(",")
        rest = toks[1:]
        typ = default = lo = hi = None
        multi = "..." in rest
        required = "REQUIRED" in rest
        rng = re.search(r"in \[(\S+) - (\S+)\]", head)
        if rng:
            lo, hi = rng.group(1), rng.group(2)
        if rest and rest[0] not in ("...", "REQUIRED"):
            t = rest[0]
            if "=" in t:
                t, default = t.split("=", 1)
            typ = t.split(":")[0]
        positional = section == "Positionals"
        if names == ["-h", "--help"]:
            last = None
            continue
        last = Option(names, typ, default, multi, required, lo, hi, desc, positional)
        options.append(last)
    return subs, options


def run_plain(binary, args, timeout=20):
    p = subprocess.run([binary] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


DESCRIPTIONS = {}  # command path -> its line in its parent's help


def discover(binary):
    """{command path: [Option]} for every leaf command (one with no subcommands)."""
    leaves = {}

    def walk(path, depth):
        rc, out, err = run_plain(binary, path + ["--help"])
        if rc != 0:
            raise SystemExit(f"hostile: 'ridge {' '.join(path)} --help' exited {rc}: {err.strip()}")
        subs, options = parse_help(out)
        if subs and depth < 4:
            for name, desc in subs:
                DESCRIPTIONS[" ".join(path + [name])] = desc
                walk(path + [name], depth + 1)
        elif path:
            leaves[" ".join(path)] = options

    walk([], 0)
    return leaves


# --------------------------------------------------------------------------------------------- cases


def base_for(command):
    best = None
    for key in BASE:
        if command == key or command.startswith(key + " "):
            if best is None or len(key) > len(best):
                best = key
    return list(BASE[best]) if best else []


class Case:
    def __init__(self, command, option, kind, argv, note="", writes=False, family="sweep", **attack):
        self.writes = writes      # the option writes the file it is given
        self.command = command
        self.option = option      # the option's name, or '' for the base run
        self.kind = kind          # what was tried (a value kind, a path kind)
        self.argv = argv          # arguments after the binary, with {placeholders}
        self.note = note
        self.family = family      # 'sweep' (one option at a time) or an attack family (ATTACKS)
        self.result = None
        # What an attack adds (all optional):
        self.env = attack.get("env", {})            # variables set (or, as None, removed); {abs} is the case folder
        self.stdout = attack.get("stdout")          # a file stdout goes to ('/dev/full'), else a pipe
        self.setup = attack.get("setup", [])        # callables(folder) run after the inputs are copied
        self.watch = attack.get("watch", [])        # more inputs to compare (files or folders, case-relative)
        self.tokenizers = attack.get("tokenizers", [])  # tokenizer folders that must still load afterwards
        self.timeout = attack.get("timeout")        # seconds, instead of --timeout
        self.as_limit = attack.get("as_limit")      # bytes of address space (prlimit --as)
        self.must_refuse = attack.get("must_refuse", False)  # exit 0 is a break ('accepted')
        self.names = attack.get("names")            # words of which exit 2's line must hold one
        self.max_seconds = attack.get("max_seconds")  # a run slower than this is a break ('slow')
        self.max_rss = attack.get("max_rss")        # bytes; a peak RSS above it is a break ('memory')
        self.twin = attack.get("twin")              # the run this one is compared with (stdout: the same on a pipe)
        self.judge = attack.get("judge", "")        # the judgement of its family ('knob', 'path-knob', ...)

    def key(self):
        if self.family != "sweep":
            return (self.family, self.command, self.option, self.kind)
        return (self.command, self.option, self.kind)


def strip_option(base, opt):
    """base without opt and its value (options) or without the positional's base word."""
    out = []
    i = 0
    names = set(opt.names)
    while i < len(base):
        a = base[i]
        if a in names:
            i += 1 if opt.is_flag else 2
            continue
        if any(a.startswith(n + "=") for n in opt.names if n.startswith("--")):
            i += 1
            continue
        out.append(a)
        i += 1
    return out


def positional_slots(base):
    """Indexes of the base's positional words (placeholders not preceded by an option)."""
    slots = []
    for i, a in enumerate(base):
        if a.startswith("{") and (i == 0 or not base[i - 1].startswith("-")):
            slots.append(i)
    return slots


def with_value(command, options, opt, value):
    base = base_for(command)
    if opt.positional:
        idx = [o for o in options if o.positional].index(opt)
        slots = positional_slots(base)
        if idx < len(slots):
            base[slots[idx]] = value
            return base
        return base + [value]
    base = strip_option(base, opt)
    if opt.is_flag:
        return base + ([opt.name] if value is None else [opt.name + "=" + value])
    # '--opt=value' keeps a value that starts with '-' a value
    return base + [opt.name + "=" + value]


def input_placeholders(command):
    return [a for a in base_for(command) if a.startswith("{") and a != "{out}" and not a.startswith("{out}")]


def make_cases(leaves, rng):
    cases = []
    for command, options in leaves.items():
        cases.append(Case(command, "", "base", base_for(command)))
        for opt in options:
            if opt.is_flag:
                cases.append(Case(command, opt.name, "flag", with_value(command, options, opt, None)))
                for kind, v in [("flag=abc", "abc"), ("flag=", "")]:
                    cases.append(Case(command, opt.name, kind, with_value(command, options, opt, v)))
                continue
            for kind, v in CALIBRATION + NUMBER_VALUES:
                cases.append(Case(command, opt.name, kind, with_value(command, options, opt, v)))
            r = rng.choice([str(rng.randint(-10 ** 12, 10 ** 12)), repr(rng.uniform(-1e6, 1e6)),
                            str(rng.randint(0, 1 << 70))])
            cases.append(Case(command, opt.name, "random", with_value(command, options, opt, r), note=r))
            if opt.is_path():
                for kind, v in path_values(command, opt):
                    cases.append(Case(command, opt.name, kind, with_value(command, options, opt, v),
                                      writes=opt.is_output()))
            if opt.name in ("--set",):
                cases.extend(set_cases(command, options, opt))
    return cases


def path_values(command, opt):
    vals = [
        ("directory", "{dir}"),
        ("fifo", "{fifo}"),
        ("dangling-symlink", "{dangling}"),
        ("read-only-file", "{readonly}"),
        ("too-long-name", "x" * (NAME_MAX + 20)),
        ("missing-folder", "missing/folder/file.json"),
        ("empty-file", "{emptyfile}"),
        ("garbage-file", "{garbage}"),
        ("dev-null", "/dev/null"),
        ("trailing-slash", "{text}/"),
    ]
    if opt.is_output():
        for ph in input_placeholders(command):
            name = ph.strip("{}")
            vals += [
                (f"input {name}", ph),
                (f"input {name} as ./", "./" + ph),
                (f"input {name} via sub/..", "sub/../" + ph),
                (f"input {name} absolute", "{abs}/" + ph),
                (f"input {name} symlink", "{link:" + name + "}"),
                (f"input {name} hard link", "{hard:" + name + "}"),
                (f"input {name} without extension", "{noext:" + name + "}"),
            ]
    return vals


def set_cases(command, options, opt):
    """--set key=value for every axis the benchmark names in its own error message."""
    cases = []
    axes = AXES.get(command, [])
    for axis in axes:
        for kind, v in CALIBRATION + NUMBER_VALUES:
            cases.append(Case(command, f"--set {axis}", kind,
                              with_value(command, options, opt, f"{axis}={v}")))
    for kind, v in [("no-key", "=1"), ("no-equals", "abc"), ("empty-list", "n="), ("bogus-axis", "bogus=1")]:
        cases.append(Case(command, "--set", kind, with_value(command, options, opt, v)))
    return cases


AXES = {}


def discover_axes(binary, leaves, fixture):
    """The sweep axes of each benchmark, from its answer to an unknown one ('it has: a, b')."""
    for command, options in leaves.items():
        if not any(o.name == "--set" for o in options):
            continue
        argv = [binary] + command.split() + ["--set", "hostile_no_such_axis=1"]
        try:
            p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20, cwd=fixture,
                               stdin=subprocess.DEVNULL, env=case_env(fixture))
        except subprocess.TimeoutExpired:
            continue
        m = re.search(r"\((?:it has|accepted): ([^)]*)\)", p.stderr.decode(errors="replace"))
        if m:
            AXES[command] = [a.strip() for a in m.group(1).split(",") if a.strip()]


# ------------------------------------------------------------------------------------------ attacks
#
# The sweep above changes one option at a time. The attack families below make the cases it cannot:
# an output pointed at each input (cross), a stdout that cannot be written (stdout), a compiler that
# hangs (jit), inputs nested past any parser's stack (deep), sizes that must be refused before they
# are allocated (huge), and hostile environment variables (env).

ATTACKS = ["cross", "stdout", "jit", "deep", "huge", "env"]
FAMILIES = ["sweep"] + ATTACKS
SETTINGS = {"deep_depth": 300000, "jit_deadline": 60.0, "huge_as": 8 << 30, "huge_rss": 2 << 30,
            "huge_seconds": 10.0, "pretoken_bytes": 1 << 30, "avx2": False}
# Outputs that may name one input: a checkpoint may be the --resume file (resuming and saving in place
# is the usual way to continue; apps/ridge/cmd_train.cpp).
SAME_FILE_OK = {("train", "--checkpoint", "--resume")}


def prefix_table(table, command):
    best = None
    for key in table:
        if command == key or command.startswith(key + " "):
            if best is None or len(key) > len(best):
                best = key
    return table[best] if best else None


def bases_of(command):
    """The base arguments and every INPUT_BASES alternative of a command."""
    out = [base_for(command)]
    for extra in prefix_table(INPUT_BASES, command) or []:
        if list(extra) not in out:
            out.append(list(extra))
    return out


def option_of(options, name):
    for o in options:
        if name in o.names:
            return o
    return None


def parse_argv(options, argv):
    """[(Option, value)] of an argument list: '--opt value', '--opt=value' and positionals, in order."""
    pairs = []
    positionals = [o for o in options if o.positional]
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("-") and len(a) > 1 and not re.fullmatch(r"-[\d.]+", a):
            name, eq, val = a.partition("=")
            opt = option_of(options, name)
            if opt is None or opt.is_flag:
                i += 1
                continue
            if eq:
                pairs.append((opt, val))
                i += 1
            else:
                if i + 1 < len(argv):
                    pairs.append((opt, argv[i + 1]))
                i += 2
            continue
        if positionals:
            pairs.append((positionals[0], a))
            if not positionals[0].multi:
                positionals = positionals[1:]
        i += 1
    return pairs


class Input:
    def __init__(self, path, option, rule, is_dir):
        self.path = path        # relative to the case folder (absolute if it lies outside it)
        self.option = option    # the option (or positional) that brought it in
        self.rule = rule        # 'file', 'folder', 'file in folder', 'checkpoint', 'recorded folder', ...
        self.is_dir = is_dir


def derive_inputs(options, argv, fixture):
    """Every file a run with these arguments reads, by a rule per kind of input.

    An option (or positional) whose help speaks of a file and that does not write one is an input:
      - a folder (a tokenizer folder): the folder and every file in it (vocab.json, merges.txt,
        special_tokens.json, whatever it holds);
      - a safetensors file (8 bytes little-endian length + a JSON header): the file, and the tokenizer
        folder its metadata records (__metadata__ -> tokenizer -> path) with every file in it;
      - any other file: the file.
    Paths are resolved in `fixture` (each case's folder is a copy of it)."""
    found, seen = [], set()

    def add(inp):
        if inp.path not in seen:
            seen.add(inp.path)
            found.append(inp)

    def add_folder(rel, option, rule):
        full = rel if os.path.isabs(rel) else os.path.join(fixture, rel)
        add(Input(rel, option, rule, True))
        for d, _, files in os.walk(full):
            for f in sorted(files):
                p = os.path.join(d, f)
                add(Input(os.path.relpath(p, fixture) if not os.path.isabs(rel) else p, option,
                          "file in " + rule, False))

    for opt, value in parse_argv(options, argv):
        # An option whose help speaks of a file, or any option given the name of a file that exists
        # (roofline plot --hw takes chip ids or chip files): an input, unless the option writes.
        if opt.is_output() or (not opt.is_path() and "{" not in value):
            continue
        rel = resolve(value, fixture)
        full = os.path.join(fixture, rel)
        if not os.path.exists(full):
            continue
        if os.path.isdir(full):
            add_folder(rel, opt.name, "folder")
        elif read_header(full):
            add(Input(rel, opt.name, "checkpoint", False))
            rec = recorded_tokenizer(full)
            if rec and os.path.isdir(rec):
                inside = os.path.relpath(rec, fixture)
                add_folder(inside if not inside.startswith("..") else rec, opt.name, "recorded folder")
        else:
            add(Input(rel, opt.name, "file", False))
    return found


def set_value(base, options, opt, value):
    """base with `opt` given `value` (replacing the base's own)."""
    if opt.positional:
        idx = [o for o in options if o.positional].index(opt)
        slots = positional_slots(base)
        base = list(base)
        if idx < len(slots):
            base[slots[idx]] = value
            return base
        return base + [value]
    return strip_option(base, opt) + [opt.name + "=" + value]


def file_kind(path):
    """'checkpoint', 'json', 'text' or 'other', from the bytes."""
    if read_header(path):
        return "checkpoint"
    try:
        with open(path, "rb") as f:
            data = f.read(1 << 20)
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return "other"
    if "\0" in text:
        return "other"  # a token file (uint16), not text
    try:
        json.loads(text)
        return "json"
    except ValueError:
        pass
    return "text" if " " in text else "other"


# ---- cross: every output onto every input


def cross_cases(command, options, fixture):
    outs = [o for o in options if o.is_output()]
    if not outs:
        return []
    has_force = option_of(options, "--force") is not None
    configs = bases_of(command)
    cases = []
    for ci, base in enumerate(configs):
        ins = derive_inputs(options, base, fixture)
        if not ins:
            continue
        watch = [i.path for i in ins]
        tokenizers = [i.path for i in ins if i.is_dir]
        tag = f"[{ci}] " if len(configs) > 1 else ""
        for o in outs:
            folder_out = is_folder_output(o)
            # An output named without its extension (report --out X writes X.png, X.svg, X.json): the
            # input without its extension, so that what it adds lands on the input.
            stem_out = "without extension" in o.desc
            targets = []
            for i in ins:
                if (command, o.name, i.option) in SAME_FILE_OK and i.rule == "checkpoint":
                    continue
                p = i.path
                if stem_out and not i.is_dir and not os.path.isabs(p) and os.path.splitext(p)[1]:
                    stem = os.path.splitext(p)[0]
                    # Exit 0 is no break here (X.png beside X.jsonl harms nothing); a changed input is.
                    for sp, val in [("", stem), ("./", "./" + stem), ("absolute", "{abs}/" + stem)]:
                        targets.append((f"{stem}, {p} without its extension" + (f" ({sp})" if sp else "")
                                        + f" [{i.rule} of {i.option}]", val, i, False))
                    continue
                if os.path.isabs(p):
                    spellings = [("", p)]
                elif i.is_dir:
                    spellings = [("", p), ("absolute", "{abs}/" + p), ("trailing /", p + "/")]
                else:
                    spellings = [("", p), ("./", "./" + p), ("sub/..", "sub/../" + p), ("absolute", "{abs}/" + p),
                                 ("symlink", "{link:" + p + "}"), ("hard link", "{hard:" + p + "}")]
                for sp, val in spellings:
                    targets.append((f"{p}" + (f" ({sp})" if sp else "") + f" [{i.rule} of {i.option}]", val, i,
                                    True))
                parent = os.path.dirname(p)
                if folder_out and not i.is_dir and parent and not os.path.isabs(p) and \
                        parent not in {t.path for t in ins}:
                    for sp, val in [("", parent), ("absolute", "{abs}/" + parent)]:
                        targets.append((f"{parent}, the folder of {p}" + (f" ({sp})" if sp else ""), val, i, True))
            for label, val, i, must in targets:
                for force in ([False, True] if has_force else [False]):
                    argv = set_value(base, options, o, val)
                    if force and "--force" not in argv:
                        argv = argv + ["--force"]
                    names = [n for n in o.names if n.startswith("-")] + [i.option, os.path.basename(i.path)]
                    cases.append(Case(command, o.name, f"{tag}onto {label}" + (" --force" if force else ""), argv,
                                      family="cross", watch=watch, tokenizers=tokenizers, must_refuse=must,
                                      names=names, judge="cross"))
    return cases


# ---- stdout: /dev/full


def stdout_cases(command, options):
    if command == "ridge":
        variants = [("--help", ["--help"]), ("--version", ["--version"])]
    else:
        base = base_for(command)
        variants = [("base", base)]
        if option_of(options, "--json") is not None and "--json" not in base:
            variants.append(("--json", base + ["--json"]))
        # An output that defaults to standard output, left out.
        for o in options:
            if o.is_output() and not o.required and "standard output" in o.desc and any(a in o.names for a in base):
                variants.append((f"without {o.name}", strip_option(base, o)))
        variants.append(("--help", ["--help"]))
    cases = []
    seen = set()
    for label, argv in variants:
        if tuple(argv) in seen:
            continue
        seen.add(tuple(argv))
        twin = Case(command, "", f"{label} (stdout a pipe)", argv, family="stdout", judge="twin")
        full = Case(command, "", f"{label} > /dev/full", argv, family="stdout", stdout="/dev/full", twin=twin,
                    judge="full")
        cases += [twin, full]
    return cases


# ---- jit: a compiler that hangs

JIT_SCRIPTS = {
    # answers --version, then sleeps on every compile
    "answers --version, then sleeps": 'if [ "$1" = "--version" ]; then echo "hostile-c++ 1.0"; exit 0; fi\n'
              'echo $$ >> "{pids}"\nexec sleep {mark}\n',
    # leaves a child that holds the output pipes open, and exits at once
    "leaves a child holding its output pipe": 'if [ "$1" = "--version" ]; then echo "hostile-c++ 1.0"; exit 0; fi\n'
                            'sleep {mark} &\necho $! >> "{pids}"\nexit 1\n',
    # the same child, in a session of its own (a process-group kill does not reach it)
    "leaves a child in a session of its own holding its output pipe": 'if [ "$1" = "--version" ]; then echo "hostile-c++ 1.0"; exit 0; fi\n'
                                   'setsid sleep {mark} &\necho $! >> "{pids}"\nexit 1\n',
    # hangs on --version itself
    "hangs on --version": 'echo $$ >> "{pids}"\nexec sleep {mark}\n',
}
JIT_PROMPTS = 8   # 5..16 rows: the decode GEMMs the JIT serves on the AVX2 path (docs/jit.md)


def hostile_compiler(kind, serial):
    def setup(folder):
        # The sleep's duration marks it (kill_recorded finds it by that), and bounds it.
        mark = f"{int(2 * SETTINGS['jit_deadline']) + 120}.{serial:04d}{random.randint(0, 999999):06d}"
        JIT_MARK[folder] = mark
        d = os.path.join(folder, "hostile-cxx")
        os.makedirs(d, exist_ok=True)
        script = os.path.join(d, "c++")
        with open(script, "w") as f:
            f.write("#!/bin/sh\n" + JIT_SCRIPTS[kind].format(pids=os.path.join(folder, "jit.pids"), mark=mark))
        os.chmod(script, 0o755)
    return setup


def jit_cases(command, options):
    if not SETTINGS["avx2"]:
        return []
    deadline = SETTINGS["jit_deadline"]
    env = {"RIDGE_JIT": "1", "RIDGE_ISA": "avx2", "RIDGE_JIT_CXX": "{abs}/hostile-cxx/c++",
           "RIDGE_JIT_CACHE_DIR": "{abs}/jit-cache"}
    cases = []
    if command == "generate":
        base = strip_option(base_for(command), option_of(options, "--prompt"))
        argv = base + [w for i in range(JIT_PROMPTS) for w in ("--prompt", "p" * (i + 1))]
        kinds = list(JIT_SCRIPTS)
    elif command == "jit list":
        argv, kinds = base_for(command), ["hangs on --version"]
    else:
        return []
    for n, kind in enumerate(kinds):
        cases.append(Case(command, "RIDGE_JIT_CXX", f"a compiler that {kind}", argv, family="jit", env=env,
                          setup=[hostile_compiler(kind, len(cases) + 1 + 10 * n)], timeout=2 * deadline + 20,
                          max_seconds=2 * deadline, judge="jit"))
    return cases


# ---- deep: JSON nested past any recursive parser's stack


def deep_text(kind, original, depth):
    """A JSON document nested `depth` deep: the whole document, or the first value of the original."""
    if kind == "document":
        return "[" * depth + "]" * depth
    if kind == "object":
        return '{"a":' * depth + "1" + "}" * depth
    # the first value of the original nested deep (vocab.json: a token's id)
    try:
        doc = json.loads(original)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and doc:
        k = next(iter(doc))
        doc[k] = "__DEEP__"
    elif isinstance(doc, list) and doc:
        doc[0] = "__DEEP__"
    else:
        doc = ["__DEEP__"]
    inner = json.dumps(doc, separators=(",", ":"))
    return inner.replace('"__DEEP__"', "[" * depth + "1" + "]" * depth, 1)


def write_deep_json(rel, kind):
    def setup(folder):
        path = os.path.join(folder, rel)
        with open(path) as f:
            original = f.read()
        with open(path, "w") as f:
            f.write(deep_text(kind, original, SETTINGS["deep_depth"]))
    return setup


def edit_header(rel, edit):
    """A case's setup that rewrites the safetensors header of the file `rel`: edit(header dict) gives the
    new header's text (a file without a readable header is left as it is)."""
    def setup(folder):
        path = os.path.join(folder, rel)
        got = read_header(path)
        if got:
            write_header(path, edit(got[0]).encode())
    return setup


def write_deep_checkpoint(rel, kind):
    def edit(h):
        depth = SETTINGS["deep_depth"]
        deep_obj = '{"a":' * depth + "1" + "}" * depth
        meta = h.setdefault("__metadata__", {})
        if kind == "metadata config nested deep":
            meta["config"] = deep_obj
        elif kind == "a config value nested deep":
            try:
                cfg = json.loads(meta.get("config", "{}"))
            except ValueError:
                cfg = {}
            k = next(iter(cfg), "num_layers")
            cfg[k] = "__DEEP__"
            meta["config"] = json.dumps(cfg, separators=(",", ":")).replace(
                '"__DEEP__"', "[" * depth + "1" + "]" * depth)
        elif kind == "metadata tokenizer nested deep":
            meta["tokenizer"] = deep_obj
        elif kind == "header nested deep":
            h = {"deep": "__DEEP__", **h}
        elif kind == "a tensor's shape nested deep":
            for k, v in h.items():
                if k != "__metadata__" and isinstance(v, dict):
                    v["shape"] = "__DEEP__"
                    break
        text = json.dumps(h, separators=(",", ":"))
        return text.replace('"__DEEP__"', "[" * depth + "1" + "]" * depth, 1)
    return edit_header(rel, edit)


DEEP_JSON = ["document", "object", "first value"]
TEXT_OPTION = re.compile(r"text|prompt")  # an input read as bytes of text, not parsed
DEEP_CHECKPOINT = ["metadata config nested deep", "a config value nested deep", "metadata tokenizer nested deep",
                   "header nested deep", "a tensor's shape nested deep"]


def deep_cases(command, options, fixture):
    cases, seen = [], set()
    configs = bases_of(command)
    depth = SETTINGS["deep_depth"]
    for ci, base in enumerate(configs):
        for i in derive_inputs(options, base, fixture):
            if i.is_dir or os.path.isabs(i.path) or i.path in seen:
                continue
            seen.add(i.path)
            kind = file_kind(os.path.join(fixture, i.path))
            if TEXT_OPTION.search(i.option):
                continue  # read as text, whatever it holds
            # A recorded tokenizer is read by some commands (generate), only named by others (train
            # --resume, which records it again): there, exit 0 is no break.
            must = i.rule != "file in recorded folder"
            if kind == "json":
                variants = [(f"{i.path}: " + (f"the document nested {depth} deep" if k == "document" else
                                              f"objects nested {depth} deep" if k == "object" else
                                              f"its first value nested {depth} deep"),
                             write_deep_json(i.path, k)) for k in DEEP_JSON]
            elif kind == "checkpoint":
                variants = [(f"{i.path}: {k} ({depth})", write_deep_checkpoint(i.path, k)) for k in DEEP_CHECKPOINT]
            else:
                continue
            for label, setup in variants:
                cases.append(Case(command, i.option, label, base, family="deep", setup=[setup], watch=[],
                                  must_refuse=must, judge="deep"))
    return cases


# ---- huge: sizes refused before they are allocated

HUGE_VALUES = [("1e8", "100000000"), ("1e12", "1000000000000"), ("2^62", "4611686018427387904"),
               ("int64-max", "9223372036854775807")]
HUGE_AXIS_VALUES = [("1e12", "1000000000000"), ("2^62", "4611686018427387904")]
# Counts of repetitions (they cost time, not memory) are not sizes.
NOT_A_SIZE = re.compile(r"iter|step|warmup|repeat|every|calls|round|time|seed|rank")
# From the issue: these must be refused (exit 2, one line naming an option), quickly, in little memory.
HUGE_MUST = [
    ("generate", [("--context", "100000000"), ("--max-tokens", "99000000")]),
    ("generate", [("--max-tokens", "9223372036854775807")]),
    ("generate", [("--context", "4611686018427387904")]),
    ("train", [("--vocab", "1000000000000")]),
    ("train", [("--context", "4611686018427387904")]),
]
# A checkpoint whose config claims these (each integer key in turn): 2^62 must be refused; 1e6 (the
# issue's num_layers 1000000) must be refused or run quickly in little memory (a context_length of a
# million shapes no tensor).
HUGE_CONFIG = [("1e6", 1000000, False), ("2^62", 4611686018427387904, True)]
# One pre-token (non-space bytes) this long, as a sparse file of NUL bytes (PCRE2's [^\s\p{L}\p{N}]+
# takes NUL, so the file is one pre-token), given where a command reads text: refused by these.
PRETOKEN_MUST = {"data train-bpe"}


def sizes_something(opt):
    """An option that takes a size: an integer one, or a text one (sizes with suffixes, '4K') whose
    default is a number or whose help names a size; not a count of repetitions."""
    if opt.positional or opt.is_flag or opt.multi or NOT_A_SIZE.search(opt.name):
        return False
    if opt.typ in ("INT", "UINT"):
        return True
    if opt.typ != "TEXT" or opt.is_path():
        return False
    if opt.default is not None:
        return bool(re.fullmatch(r"\d+[KMGkmg]?", opt.default))
    return bool(re.search(r"\b(count|d_model|d_ff|heads|size|tokens|rows|columns|length|batch|elements|bytes)\b",
                          opt.desc))


def huge_common(**kw):
    kw.setdefault("as_limit", SETTINGS["huge_as"])
    kw.setdefault("max_rss", SETTINGS["huge_rss"])
    return kw


def write_config_value(rel, key, value):
    def edit(h):
        cfg = json.loads(h["__metadata__"]["config"])
        cfg[key] = value
        h["__metadata__"]["config"] = json.dumps(cfg, separators=(",", ":"))
        return json.dumps(h, separators=(",", ":"))
    return edit_header(rel, edit)


def write_pretoken(rel):
    def setup(folder):
        path = os.path.join(folder, rel)
        os.remove(path)
        with open(path, "wb") as f:
            f.truncate(SETTINGS["pretoken_bytes"])  # sparse: no disk, all NUL
    return setup


def huge_cases(command, options, fixture):
    cases = []
    explicit = set()
    for cmd, pairs in HUGE_MUST:
        if cmd != command:
            continue
        argv = base_for(command)
        for name, value in pairs:
            opt = option_of(options, name)
            if opt is not None:
                argv = set_value(argv, options, opt, value)
        explicit.add(tuple(argv))
        cases.append(Case(command, " ".join(n for n, _ in pairs), " ".join(f"{n} {v}" for n, v in pairs), argv,
                          family="huge", must_refuse=True, names=[n for n, _ in pairs],
                          max_seconds=SETTINGS["huge_seconds"], judge="huge-must", **huge_common()))
    for opt in options:
        if not sizes_something(opt):
            continue
        for kind, value in HUGE_VALUES:
            argv = set_value(base_for(command), options, opt, value)
            if tuple(argv) in explicit:
                continue
            cases.append(Case(command, opt.name, kind, argv, family="huge", names=opt.names, judge="huge",
                              **huge_common()))
    for axis in AXES.get(command, []):
        if NOT_A_SIZE.search(axis):
            continue
        opt = option_of(options, "--set")
        for kind, value in HUGE_AXIS_VALUES:
            argv = base_for(command) + ["--set", f"{axis}={value}"]
            cases.append(Case(command, f"--set {axis}", kind, argv, family="huge", names=["--set", axis],
                              judge="huge", **huge_common()))
    seen = set()
    for ci, base in enumerate(bases_of(command)):
        for i in derive_inputs(options, base, fixture):
            if i.is_dir or os.path.isabs(i.path) or i.path in seen:
                continue
            seen.add(i.path)
            full = os.path.join(fixture, i.path)
            kind = file_kind(full)
            names = [i.option, os.path.basename(i.path)]
            if kind == "checkpoint":
                try:
                    cfg = json.loads(read_header(full)[0]["__metadata__"]["config"])
                except (KeyError, TypeError, ValueError):
                    cfg = {}
                for key, v in cfg.items():
                    if not isinstance(v, int) or isinstance(v, bool):
                        continue
                    for label, value, must in HUGE_CONFIG:
                        cases.append(Case(command, i.option, f"{i.path}: config {key} {label}", base, family="huge",
                                          setup=[write_config_value(i.path, key, value)], must_refuse=must,
                                          names=names + [key], max_seconds=SETTINGS["huge_seconds"],
                                          judge="huge-must" if must else "huge", **huge_common()))
            elif kind == "text" and i.rule == "file":
                must = command in PRETOKEN_MUST
                size = SETTINGS["pretoken_bytes"]
                # Reading 1 GiB may take a few times that much memory (the text, its tokens): not 20 times.
                cases.append(Case(command, i.option, f"{i.path}: one pre-token of {size >> 20} MiB (NUL bytes)", base,
                                  family="huge", setup=[write_pretoken(i.path)], must_refuse=must, names=names,
                                  max_seconds=SETTINGS["huge_seconds"] if must else None, timeout=60.0,
                                  judge="huge-must" if must else "huge",
                                  **huge_common(max_rss=max(SETTINGS["huge_rss"], 4 * size))))
    return cases


# ---- env: hostile values of every variable ridge reads

# (kind, value, must be refused by a knob): the issue's six first.
ENV_VALUES = [("zero", "0", None), ("negative", "-1", True), ("junk", "junk", True), ("exponent", "1e3", True),
              ("20 digits", "9" * 20, True), ("list with junk", "2,junk", True), ("hex", "0x10", True),
              ("trailing junk", "4x", True), ("plus", "+1", False), ("octal", "016", False), ("nan", "nan", True),
              ("int64-max", "9223372036854775807", True), ("space", " 1", False), ("newline", "1\n", False),
              ("empty", "", False)]
# A knob reads a number as every option does: these spellings answer as their calibration does.
ENV_SAME_VALUE = {"plus": "one", "octal": "sixteen"}
ENV_BRIEF = 6  # the first six are tried on every command; the rest on ENV_FULL
ENV_CALIBRATION = [("one", "1"), ("two", "2"), ("sixteen", "16"), ("list", "2,1")]
PATH_VALUES = [("missing folder", "{abs}/missing/folder"), ("a file", "{abs}/input.txt"),
               ("relative", "relative/folder"), ("a FIFO", "{abs}/afifo"),
               ("name past NAME_MAX", "{abs}/" + "x" * (NAME_MAX + 20)), ("empty", "")]
# The commands that get every value, every calibration and the path variables (the knobs are read
# at start-up by every command, so the others get the issue's six values only).
ENV_FULL = ["info", "generate", "train", "bench gemm", "jit list", "jit clear", "hw show", "hw list", "report",
            "roofline matmul", "roofline plot", "memory plot", "data encode", "probe"]
ENV_VARS = {"knobs": [], "paths": []}


def env_variables(binary):
    """The knobs and the path variables, from docs/core.md's 'Environment variables' (the section that
    lists them: 'The knobs (...)' and 'path variables (...)'), 'A/B/C' spelled out, a '*' and any
    RIDGE_* name core.md mentions elsewhere completed from the names in the binary."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        with open(os.path.join(here, "..", "docs", "core.md")) as f:
            doc = f.read()
    except OSError:
        doc = ""
    try:
        with open(binary, "rb") as f:
            in_binary = set(x.decode() for x in re.findall(rb"RIDGE_[A-Z0-9_]+", f.read()))
    except OSError:
        in_binary = set()

    def names(text):
        out = []
        for tok in re.findall(r"`([A-Z][A-Z0-9_]*(?:/[A-Z0-9_]+)*\*?)`", text):
            parts = tok.split("/")
            first = parts[0]
            if first.endswith("*"):
                out += sorted(n for n in in_binary if n.startswith(first[:-1]))
                continue
            out.append(first)
            stem = first.rsplit("_", 1)[0] + "_"
            out += [stem + p for p in parts[1:]]
        return out

    m = re.search(r"### Environment variables.*?(?=\n### |\n## )", doc, re.S)
    section = m.group(0) if m else ""
    k = re.search(r"The knobs \((.*?)\) are parsed", section, re.S)
    p = re.search(r"path variables \((.*?)\) are read", section, re.S)
    knobs = names(k.group(1)) if k else ["RIDGE_ISA", "RIDGE_JIT", "OMP_NUM_THREADS"]
    paths = names(p.group(1)) if p else ["RIDGE_HOME"]
    for n in sorted(set(re.findall(r"\bRIDGE_[A-Z0-9_]+\b", doc)) & in_binary):
        if n not in knobs and n not in paths:
            knobs.append(n)
    ENV_VARS["knobs"] = list(dict.fromkeys(knobs))
    ENV_VARS["paths"] = list(dict.fromkeys(paths))


def env_cases(command, options):
    if command == "ridge":
        return []
    base = base_for(command)
    full = any(command == f or command.startswith(f + " ") for f in ENV_FULL)
    cases = [Case(command, "", "no variable", base, family="env", judge="env-base")]
    for var in ENV_VARS["knobs"]:
        values = ENV_VALUES if full else ENV_VALUES[:ENV_BRIEF]
        for kind, value, must in values:
            cases.append(Case(command, var, kind, base, family="env", env={var: value}, names=[var],
                              must_refuse=bool(must), judge="knob" if must is not None else "knob-zero"))
        if full:
            for kind, value in ENV_CALIBRATION:
                cases.append(Case(command, var, kind, base, family="env", env={var: value}, judge="knob-calibration"))
    if full:
        for var in ENV_VARS["paths"]:
            env = {}
            if var.startswith("RIDGE_JIT_") and SETTINGS["avx2"]:
                env = {"RIDGE_JIT": "1", "RIDGE_ISA": "avx2"}
            for kind, value in PATH_VALUES:
                cases.append(Case(command, var, kind, base, family="env", env={**env, var: value},
                                  names=[var], judge="path-knob"))
    return cases


def attack_cases(families, leaves, fixture_root, top_level):
    cases = []
    for command, options in list(leaves.items()) + ([("ridge", [])] if top_level else []):
        fixture = os.path.join(fixture_root, command.replace(" ", "_"))
        if "cross" in families and command != "ridge":
            cases += cross_cases(command, options, fixture)
        if "stdout" in families:
            cases += stdout_cases(command, options)
        if "jit" in families:
            cases += jit_cases(command, options)
        if "deep" in families and command != "ridge":
            cases += deep_cases(command, options, fixture)
        if "huge" in families and command != "ridge":
            cases += huge_cases(command, options, fixture)
        if "env" in families:
            cases += env_cases(command, options)
    return cases


# ------------------------------------------------------------------------------------------ fixtures


def make_fixture(root, binary, command):
    """Input files every case of `command` may name, in a folder of its own."""
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "input.txt"), "w") as f:
        f.write(TEXT)
    with open(os.path.join(root, "tokens.bin"), "wb") as f:
        data = TEXT.encode()
        f.write(b"".join(bytes((c, 0)) for c in data))
    grid = GRIDS.get(command, {})
    with open(os.path.join(root, "grid.json"), "w") as f:
        json.dump(grid, f)
    with open(os.path.join(root, "shapes.json"), "w") as f:
        json.dump(GEMM_SHAPES, f)
    rc, out, _ = run_plain(binary, ["hw", "show", "h100", "--json"])
    with open(os.path.join(root, "chip.json"), "w") as f:
        f.write(out if rc == 0 else "{}")
    os.makedirs(os.path.join(root, "home"), exist_ok=True)
    shutil.copy(os.path.join(root, "chip.json"), os.path.join(root, "home", "this.json"))
    snap = os.path.join(root, "snapshot.json")
    p = subprocess.run([binary, "bench", "trace-overhead", "--quick", "--no-progress", "--set", "calls=10",
                        "--memory", snap], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60,
                       cwd=root, env=case_env(root), stdin=subprocess.DEVNULL)
    if p.returncode != 0 or not os.path.exists(snap):
        with open(snap, "w") as f:
            json.dump({"format": "ridge-memory-snapshot", "version": 1, "events": []}, f)
    # A small BPE tokenizer as GPT-2's pair of files (vocab.json, merges.txt), trained on the text.
    tok = os.path.join(root, "tokenizer.tmp")
    subprocess.run([binary, "data", "train-bpe", os.path.join(root, "input.txt"), "--vocab-size", "270", "-o", tok,
                    "--threads", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60,
                   stdin=subprocess.DEVNULL)
    for name in ("vocab.json", "merges.txt"):
        if os.path.exists(os.path.join(tok, name)):
            shutil.copy(os.path.join(tok, name), os.path.join(root, name))
    shutil.rmtree(tok, ignore_errors=True)
    with open(os.path.join(root, "garbage.bin"), "wb") as f:
        f.write(bytes(random.Random(1).getrandbits(8) for _ in range(4096)))
    with open(os.path.join(root, "prompt.txt"), "w") as f:
        f.write("It was the best")
    if SHARED.get("root") and os.path.exists(os.path.join(SHARED["root"], "results.jsonl")):
        shutil.copy(os.path.join(SHARED["root"], "results.jsonl"), os.path.join(root, "results.jsonl"))
    # A tokenizer folder (train-bpe's three files) and a checkpoint that records another copy of it
    # ('tokrec': what a --checkpoint or --resume reads without a --tokenizer), for the commands that
    # take them. Made once (shared), copied here with the recorded path pointing into this folder.
    if SHARED.get("root") and wants_model_inputs(command):
        for name in ("tok", "tokrec"):
            if os.path.isdir(os.path.join(SHARED["root"], name)):
                shutil.copytree(os.path.join(SHARED["root"], name), os.path.join(root, name), dirs_exist_ok=True)
        ckpt = os.path.join(SHARED["root"], "ckpt.safetensors")
        if os.path.exists(ckpt):
            shutil.copy(ckpt, os.path.join(root, "ckpt.safetensors"))
            point_checkpoint_at(os.path.join(root, "ckpt.safetensors"), os.path.join(root, "tokrec"))


INPUTS = {"text": "input.txt", "tokens": "tokens.bin", "grid": "grid.json", "shapes": "shapes.json",
          "chip": "chip.json", "snapshot": "snapshot.json", "vocab": "vocab.json", "merges": "merges.txt",
          "tokdir": "tok", "tokrec": "tokrec", "ckpt": "ckpt.safetensors", "prompt": "prompt.txt",
          "results": "results.jsonl"}

SHARED = {}          # 'root': the folder of the fixtures made once (tokenizer, checkpoint)
MODEL_OPTIONS = ("--tokenizer", "--checkpoint", "--resume", "--prompt-file")
LEAVES = {}          # command path -> [Option], once discovered


def wants_model_inputs(command):
    """A command that takes a tokenizer, a checkpoint or a prompt file, or whose INPUT_BASES name them."""
    named = " ".join(w for base in prefix_table(INPUT_BASES, command) or [] for w in base)
    return any(o.name in MODEL_OPTIONS for o in LEAVES.get(command, [])) or \
        any("{" + k + "}" in named or "{" + k + "}/" in named for k in ("tokdir", "tokrec", "ckpt", "prompt"))


def make_shared(root, binary):
    """The tokenizer folders and the checkpoint, made once with the binary itself."""
    os.makedirs(root, exist_ok=True)
    SHARED["root"] = root
    text = os.path.join(root, "input.txt")
    with open(text, "w") as f:
        f.write(TEXT.replace("foolishness. ", "foolishness. <|endoftext|> "))
    env = case_env(root)
    # Benchmark rows (JSON lines) for --results.
    grid = os.path.join(root, "grid-gemm.json")
    with open(grid, "w") as f:
        json.dump(GRIDS["bench gemm-dense"], f)
    p = subprocess.run([binary, "bench", "gemm-dense", "--quick", "--no-progress", "--grid-file", grid, "--iters", "1",
                        "--warmup", "0", "--json"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=60,
                       stdin=subprocess.DEVNULL, env=env, cwd=root)
    if p.returncode == 0 and p.stdout.strip():
        with open(os.path.join(root, "results.jsonl"), "wb") as f:
            f.write(p.stdout)
    subprocess.run([binary, "data", "train-bpe", text, "--vocab-size", str(TOKENIZER_VOCAB), "--special",
                    "<|endoftext|>", "-o", os.path.join(root, "tok"), "--threads", "1"], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=60, stdin=subprocess.DEVNULL, env=env)
    if not os.path.exists(os.path.join(root, "tok", "vocab.json")):
        return
    shutil.copytree(os.path.join(root, "tok"), os.path.join(root, "tokrec"))
    subprocess.run([binary, "train"] + TINY_TRAIN + ["--steps", "2", "--text", text, "--tokenizer",
                                                     os.path.join(root, "tokrec"), "--checkpoint",
                                                     os.path.join(root, "ckpt.safetensors")],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120, stdin=subprocess.DEVNULL,
                   env=env)


# ------------------------------------------------------------------------------------- safetensors


def read_header(path):
    """(header dict, header length) of a safetensors file (8 bytes little-endian length, then JSON), or None."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) != 8:
                return None
            n = int.from_bytes(head, "little")
            if n <= 0 or n > (64 << 20):
                return None
            h = json.loads(f.read(n))
    except (OSError, ValueError):
        return None
    return (h, n) if isinstance(h, dict) else None


def write_header(path, header_bytes):
    """Replaces the header of a safetensors file (its data kept), padded to 8 bytes with spaces."""
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    data = raw[8 + n:]
    header_bytes += b" " * (-len(header_bytes) % 8)
    with open(path, "wb") as f:
        f.write(len(header_bytes).to_bytes(8, "little") + header_bytes + data)


def recorded_tokenizer(path):
    """The tokenizer folder a checkpoint records (__metadata__ -> tokenizer -> path), or ''."""
    got = read_header(path)
    if not got:
        return ""
    try:
        return json.loads(got[0]["__metadata__"]["tokenizer"])["path"]
    except (KeyError, TypeError, ValueError):
        return ""


def point_checkpoint_at(path, tokenizer_dir):
    got = read_header(path)
    if not got:
        return
    h = got[0]
    try:
        t = json.loads(h["__metadata__"]["tokenizer"])
    except (KeyError, TypeError, ValueError):
        return
    t["path"] = tokenizer_dir
    h["__metadata__"]["tokenizer"] = json.dumps(t, separators=(",", ":"))
    write_header(path, json.dumps(h, separators=(",", ":")).encode())


def case_env(folder):
    env = dict(os.environ)
    env["RIDGE_HOME"] = os.path.join(folder, "home")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.pop("RIDGE_ISA", None)
    # Caches in the case's folder: a case never reads (or, with 'jit clear', empties) the user's own.
    env["RIDGE_JIT_CACHE_DIR"] = os.path.join(folder, "jit-cache")
    env["XDG_CACHE_HOME"] = os.path.join(folder, "cache")
    env.pop("RIDGE_JIT", None)
    env.pop("RIDGE_JIT_CXX", None)
    return env


# The fixed files of a case's folder, by placeholder.
FIXED_NAMES = {"out": "out/result", "dir": "adir", "fifo": "afifo", "dangling": "dangling.json",
               "readonly": "readonly.json", "emptyfile": "empty.json", "garbage": "garbage.bin"}


def resolve(a, folder):
    """Replaces the {placeholders} of one argument (an input's name, {out}, a spelling of a path)."""
    def repl(m):
        key = m.group(1)
        if key in INPUTS:
            return INPUTS[key]
        if key in FIXED_NAMES:
            return FIXED_NAMES[key]
        if key == "abs":
            return folder
        kind, _, name = key.partition(":")
        target = INPUTS.get(name, name)
        flat = target.replace("/", "_")
        if kind == "link":
            link = os.path.join(folder, "link-" + flat)
            if not os.path.lexists(link):
                os.symlink(target, link)
            return "link-" + flat
        if kind == "hard":
            hard = os.path.join(folder, "hard-" + flat)
            if not os.path.exists(hard):
                os.link(os.path.join(folder, target), hard)
            return "hard-" + flat
        if kind == "noext":
            return os.path.splitext(target)[0]
        return m.group(0)

    return re.sub(r"\{([a-z]+(?::[A-Za-z0-9_./-]+)?)\}", repl, a)


def digest_tree(folder, names):
    """{relative file: sha256} of the named files, and of every file under the named folders."""
    out = {}
    for name in names:
        path = name if os.path.isabs(name) else os.path.join(folder, name)
        if os.path.isdir(path) and not os.path.islink(path):
            for d, _, files in os.walk(path):
                for f in files:
                    full = os.path.join(d, f)
                    if os.path.isfile(full) and not os.path.islink(full):
                        out[os.path.relpath(full, folder)] = file_digest(full)
        elif os.path.isfile(path) and not os.path.islink(path):
            out[os.path.relpath(path, folder)] = file_digest(path)
    return out


def file_digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def prepare(case, fixture_root, work):
    """Makes the case's folder and returns the concrete argv and the input files to watch."""
    folder = tempfile.mkdtemp(prefix="case.", dir=work)
    fixture = os.path.join(fixture_root, case.command.replace(" ", "_"))
    for name in os.listdir(fixture):
        src = os.path.join(fixture, name)
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(folder, name))
        else:
            shutil.copy(src, os.path.join(folder, name))
    if os.path.exists(os.path.join(folder, "ckpt.safetensors")):
        point_checkpoint_at(os.path.join(folder, "ckpt.safetensors"), os.path.join(folder, "tokrec"))
    os.makedirs(os.path.join(folder, "sub"))
    os.makedirs(os.path.join(folder, "adir"))
    os.mkfifo(os.path.join(folder, "afifo"))
    os.symlink("does-not-exist.json", os.path.join(folder, "dangling.json"))
    ro = os.path.join(folder, "readonly.json")
    shutil.copy(os.path.join(folder, "chip.json"), ro)
    os.chmod(ro, 0o444)
    open(os.path.join(folder, "empty.json"), "w").close()
    for step in case.setup:
        step(folder)

    words = [] if case.command == "ridge" else case.command.split()
    argv = words + [resolve(a, folder) for a in case.argv]
    os.makedirs(os.path.join(folder, "out"), exist_ok=True)
    # The user's files: every input, and the files the path cases name. A file given to an option
    # that writes (--trace readonly.json) is that option's to replace; an input never is.
    targets = {"read-only-file": "readonly.json", "garbage-file": "garbage.bin"}
    own = targets.get(case.kind) if case.writes else None
    names = (set(INPUTS.values()) | {"garbage.bin", "readonly.json"}) - {own}
    watched = digest_tree(folder, sorted(names) + [resolve(w, folder) for w in case.watch])
    return folder, argv, watched


# ------------------------------------------------------------------------------------------- running


def listing(folder):
    out = {}
    for d, _, files in os.walk(folder):
        for f in files:
            path = os.path.join(d, f)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                out[os.path.relpath(path, folder)] = (st.st_mtime_ns, st.st_size)
    return out


MPI = {"ranks": 0, "mpirun": ""}


def launcher(command):
    """mpirun and its arguments for a command whose help says it runs under mpirun (with --mpi N)."""
    if MPI["ranks"] > 0 and "mpirun" in DESCRIPTIONS.get(command, ""):
        return [MPI["mpirun"], "--oversubscribe", "--bind-to", "none", "-np", str(MPI["ranks"])]
    return []


OUTPUT_CAP = 1 << 20  # bytes of stdout and of stderr kept per run


def spawn(argv, cwd, env, timeout, stdout_path=None, as_limit=None, after_exit=None):
    """Runs argv in a session of its own; returns (rc or None if hung, hung, stdout, stderr, peak RSS bytes,
    seconds from start to exit).

    The exit is reaped with wait4, for the run's own peak RSS. After it exits (or is killed at the
    timeout) what is left of its process group is killed, so a child that keeps the pipes open (a
    compiler's background job) cannot hold the harness."""
    pre = None
    if as_limit:
        if shutil.which("prlimit"):
            argv = ["prlimit", f"--as={int(as_limit)}", "--"] + argv
        else:
            import resource

            def limit():
                resource.setrlimit(resource.RLIMIT_AS, (int(as_limit), int(as_limit)))
            pre = limit
    out_target = open(stdout_path, "wb") if stdout_path else subprocess.PIPE
    start = time.monotonic()
    try:
        proc = subprocess.Popen(argv, stdout=out_target, stderr=subprocess.PIPE, cwd=cwd, env=env,
                                stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=pre)
    finally:
        if stdout_path:
            out_target.close()
    kept = {"out": [], "err": []}

    def pump(stream, key):
        size = 0
        for chunk in iter(lambda: stream.read(65536), b""):
            if size < OUTPUT_CAP:
                kept[key].append(chunk)
                size += len(chunk)
        stream.close()

    readers = [threading.Thread(target=pump, args=(proc.stderr, "err"), daemon=True)]
    if proc.stdout is not None:
        readers.append(threading.Thread(target=pump, args=(proc.stdout, "out"), daemon=True))
    for t in readers:
        t.start()
    status = {}
    done = threading.Event()

    def reap():
        _, st, ru = os.wait4(proc.pid, 0)
        status["st"], status["rss"], status["seconds"] = st, ru.ru_maxrss * 1024, time.monotonic() - start
        done.set()

    threading.Thread(target=reap, daemon=True).start()
    hung = not done.wait(timeout)
    if hung:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        done.wait()
    proc.returncode = os.waitstatus_to_exitcode(status["st"])
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # what is left of its group
    except (ProcessLookupError, PermissionError):
        pass
    if after_exit:
        after_exit()  # what left the group (a child in a session of its own)
    for t in readers:
        t.join(timeout=10)
    out, err = b"".join(kept["out"]), b"".join(kept["err"])
    return (None if hung else proc.returncode), hung, out, err, status["rss"], status["seconds"]


def kill_recorded(folder):
    """Kills the processes a hostile compiler script recorded (folder/jit.pids) and left behind.

    Each is checked to still be that script's sleep (its command line holds the case's marker) first."""
    path = os.path.join(folder, "jit.pids")
    if not os.path.exists(path):
        return
    marker = JIT_MARK.get(folder, "")
    with open(path) as f:
        pids = [int(x) for x in f.read().split() if x.isdigit()]
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if marker and marker.encode() in cmd:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


JIT_MARK = {}  # case folder -> the sleep duration its hostile compiler uses (a marker to find it by)


def run_case(case, binary, fixture_root, work, timeout, keep):
    folder, argv, watched = prepare(case, fixture_root, work)
    before = listing(folder)
    env = case_env(folder)
    for k, v in case.env.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v.replace("{abs}", folder)
    prefix = launcher(case.command)
    if prefix:
        env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    rc, hung, out, err, rss, seconds = spawn(prefix + [binary] + argv, folder, env, case.timeout or timeout,
                                             stdout_path=case.stdout, as_limit=case.as_limit,
                                             after_exit=lambda: kill_recorded(folder))
    kill_recorded(folder)
    after_digest = digest_tree(folder, list(watched))
    changed = []
    for name, digest in watched.items():
        if name not in after_digest:
            changed.append(f"{name} removed")
        elif after_digest[name] != digest:
            changed.append(f"{name} changed")
    # Each tokenizer folder the run read must still load: a fresh text through it, to a fresh file.
    post = []
    for tok in case.tokenizers:
        path = os.path.join(folder, resolve(tok, folder))
        check = os.path.join(folder, "post-check")
        os.makedirs(check, exist_ok=True)
        with open(os.path.join(check, "text.txt"), "w") as f:
            f.write("It was the best of times <|endoftext|> it was the worst")
        prc, phung, _, perr, _, _ = spawn([binary, "data", "encode", os.path.join(check, "text.txt"), "-o",
                                        os.path.join(check, "tokens.bin"), "--tokenizer", path], check,
                                       case_env(check), 30)
        if prc != 0:
            post.append(f"{tok} no longer loads: 'ridge data encode --tokenizer {tok}' "
                        f"{'hung' if phung else 'exited ' + str(prc)}: "
                        f"{perr.decode(errors='replace').strip().replace(folder, '<case>')[-200:]}")
    # The files the run wrote (for 'accepted' on an output that cannot be written).
    after = listing(folder)
    created = sorted(f for f, st in after.items() if before.get(f) != st and f not in watched)
    case.result = {
        "rc": rc,
        "hung": hung,
        "seconds": round(seconds, 3),
        "rss": rss,
        "stdout": out.decode(errors="replace").replace(folder, "<case>"),
        "stderr": err.decode(errors="replace").replace(folder, "<case>"),
        "changed": changed,
        "created": created,
        "post": post,
        "argv": [a.replace(folder, "<case>") for a in argv],
        "env": {k: (v or "").replace("{abs}", "<case>") for k, v in case.env.items()},
        "mpirun": bool(prefix),
    }
    JIT_MARK.pop(folder, None)
    if not keep:
        shutil.rmtree(folder, ignore_errors=True)
    return case


# ------------------------------------------------------------------------------------------- judging


def judge(cases, leaves):
    by_key = {c.key(): c for c in cases}
    long_runs = []
    opts = {(cmd, o.name): o for cmd, options in leaves.items() for o in options}
    breaks = []

    def brk(case, cause, why):
        breaks.append({"cause": cause, "why": why, "family": "sweep", "command": case.command,
                       "option": case.option, "kind": case.kind, "argv": case.result["argv"], "rc": case.result["rc"],
                       "stderr": case.result["stderr"][-600:]})

    base_ok = {c.command: c.result["rc"] == 0 for c in cases if c.kind == "base"}
    # A command that cannot run here at all (bench allreduce without mpirun) answers every case
    # with its base line: not a line about the option.
    base_line = {c.command: c.result["stderr"].strip() for c in cases if c.kind == "base" and c.result["rc"] == 2}

    def numeric(command, option):
        """(takes a number, takes only integers), from how the option answered the calibration."""
        ok = [by_key.get((command, option, k)) for k, _ in CALIBRATION]
        accepted_number = any(c is not None and c.result["rc"] == 0 for c in ok)
        abc = by_key.get((command, option, "wrong-type"))
        refused_word = abc is not None and abc.result["rc"] not in (0, None)
        frac = by_key.get((command, option, "fraction"))
        integer = frac is not None and frac.result["rc"] not in (0, None)
        return accepted_number and refused_word, integer

    for c in cases:
        r = c.result
        rc = r["rc"]
        if r.get("harness_error"):
            continue
        err_lines = [l for l in r["stderr"].splitlines()]
        if r.get("mpirun"):
            # Under mpirun the launcher adds its own notice when a rank exits non-zero; that is mpirun's
            # setting, not ridge's (docs/distributed.md), so only ridge's lines are judged.
            err_lines = [l for l in err_lines if l.startswith("ridge:")]
        if r["hung"]:
            # A valid value that asks for a long run (train --steps 4294967296) is still printing its
            # progress when the timeout ends it: a run doing what it was asked, not a hang. One that
            # printed fewer than two lines was stuck.
            if len(r["stdout"].splitlines()) >= 2:
                long_runs.append(c)
            else:
                brk(c, "hang", "still running after the timeout")
            continue
        if rc is not None and rc < 0:
            brk(c, "signal", f"killed by signal {signal.Signals(-rc).name if -rc in signal.valid_signals() else -rc}")
            continue
        judge_contract(brk, c, r, rc, err_lines)
        if rc == 2 and c.option and len(err_lines) == 1 and err_lines[0] != base_line.get(c.command):
            opt = opts.get((c.command, c.option.split()[0]))
            if opt is not None and not opt.positional and c.kind != "base":
                line = err_lines[0]
                # A value error names the option the user typed (any of its spellings; for
                # '--set KEY=...' the key will do).
                words = [n for n in opt.names if n.startswith("-") and len(n) > 2] + c.option.split()[1:]
                if not any(w in line for w in words) and \
                        not any(re.search(r"(^|\W)" + re.escape(n) + r"\b", line) for n in opt.names):
                    brk(c, "unnamed-flag", f"the line does not name {c.option}")
        spelling_break(brk, c, by_key, opts, base_ok, numeric)
        if rc != 0 or not c.option or not base_ok.get(c.command, False):
            continue
        # Exit 0: was the value one that must be refused?
        opt = opts.get((c.command, c.option.split()[0]))
        if opt is None:
            continue
        if opt.is_flag:
            if c.kind == "flag=abc":
                brk(c, "accepted", f"{c.option}=abc accepted for a flag")
            continue
        is_num, is_int = numeric(c.command, c.option)
        if is_num:
            if c.kind in NOT_A_NUMBER:
                brk(c, "accepted", f"'{value_of(c.kind)}' accepted where a number is expected")
            elif c.kind in ("negative", "negative-huge") and not documents_negative(opt):
                brk(c, "accepted", "a negative number accepted")
            elif c.kind in NOT_AN_INTEGER and is_int:
                brk(c, "accepted", f"'{value_of(c.kind)}' accepted where an integer is expected")
            elif c.kind == "int64-max+1" and is_int:
                brk(c, "accepted", "2^63 accepted where an integer is expected")
            elif c.kind == "octal":
                eight, ten = by_key.get((c.command, c.option, "eight")), by_key.get((c.command, c.option, "ten"))
                if eight and ten and eight.result["rc"] == 0:
                    if ten.result["rc"] != 0 or (r["stdout"] == eight.result["stdout"]
                                                 and r["stdout"] != ten.result["stdout"]):
                        brk(c, "accepted", "'010' read as octal 8")
        folder_kinds = ("directory", "trailing-slash") if is_folder_output(opt) else ()
        if opt.is_path() and c.kind in tuple(k for k in ("directory", "too-long-name", "fifo", "trailing-slash")
                                             if k not in folder_kinds) + \
                (("dangling-symlink", "missing-folder") if not opt.is_output() else ()):
            wrote = [f for f in r["created"] if not f.startswith("out/")]
            # An output the command says it could not write ('plot: not written: ...') is reported.
            said = "not written" in (r["stdout"] + r["stderr"]).lower()
            if not opt.is_output() or not (wrote or said):
                brk(c, "accepted", f"{c.kind} accepted for a file the command "
                                   f"{'writes' if opt.is_output() else 'reads'}")
    for c in long_runs:
        print(f"hostile: not a break: {c.command} {c.option} ({c.kind}) was still printing progress at the timeout",
              file=sys.stderr)
    return breaks


def spelling_break(brk, c, by_key, opts, base_ok, numeric):
    """A sweep case whose value is another spelling of a calibration's (SAME_VALUE) and was answered
    otherwise than it, on an option that takes a number."""
    opt = opts.get((c.command, c.option.split()[0])) if c.option else None
    if opt is None or opt.is_flag or not base_ok.get(c.command, False):
        return
    is_num, is_int = numeric(c.command, c.option)
    twin_kind = SAME_VALUE.get(c.kind) or (SAME_VALUE_REAL.get(c.kind) if not is_int else None)
    twin = by_key.get((c.command, c.option, twin_kind)) if is_num and twin_kind else None
    if twin is None or twin.result["hung"] or twin.result["rc"] not in (0, 2) or c.result["rc"] not in (0, 2):
        return
    if (c.result["rc"] == 0) != (twin.result["rc"] == 0):
        brk(c, "spelling", f"'{value_of(c.kind)}' answered exit {c.result['rc']}, "
                           f"'{value_of(twin_kind)}' exit {twin.result['rc']}")


def judge_contract(brk, c, r, rc, err_lines, exit_judged=False):
    """The checks every run is held to, by the sweep and by the attacks alike: no 'internal error', exit 0
    or 2 (unless the caller judged the exit already), an exit 2 with one line starting 'ridge:', and every
    input as it was."""
    if "internal error" in r["stdout"] or "internal error" in r["stderr"]:
        brk(c, "internal-error", "'internal error' in the output")
    if not exit_judged and rc not in (0, 2):
        brk(c, "exit-code", f"exit {rc}")
    if rc == 2 and (len(err_lines) != 1 or not err_lines[0].startswith("ridge:")):
        brk(c, "stderr", f"exit 2 with {len(err_lines)} stderr lines" if len(err_lines) != 1
            else "the line does not start with 'ridge:'")
    if r["changed"]:
        brk(c, "input-changed", ", ".join(r["changed"]))


def judge_attacks(cases):
    """Breaks of the attack families (ATTACKS); see the module's docstring for the causes."""
    breaks = []
    long_runs = []

    def brk(case, cause, why):
        r = case.result
        breaks.append({"cause": cause, "why": why, "family": case.family, "command": case.command,
                       "option": case.option, "kind": case.kind, "argv": r["argv"], "env": r.get("env", {}),
                       "stdout_to": case.stdout or "", "rc": r["rc"], "stderr": r["stderr"][-600:],
                       "seconds": r["seconds"], "rss": r.get("rss", 0)})

    ran = [c for c in cases if c.result and not c.result.get("harness_error")]
    # A command that cannot run here (bench allreduce without mpirun) answers with its own line.
    env_base = {c.command: c.result for c in ran if c.judge == "env-base"}
    base_line = {cmd: r["stderr"].strip() for cmd, r in env_base.items() if r["rc"] == 2}
    # A knob that takes 1 and refuses 2 is a switch: 0 is its 'off', not a value to refuse.
    switch = {}
    for c in ran:
        if c.judge == "knob-calibration" and c.kind in ("one", "two"):
            switch.setdefault(c.option, {})[c.kind] = c.result["rc"]
    is_switch = {k: v.get("one") == 0 and v.get("two") == 2 for k, v in switch.items()}
    env_by = {(c.command, c.option, c.kind): c for c in ran if c.family == "env"}

    for c in ran:
        r = c.result
        rc = r["rc"]
        err_lines = r["stderr"].splitlines()
        if r.get("mpirun"):
            err_lines = [l for l in err_lines if l.startswith("ridge:")]
        if c.family == "stdout" and c.twin is not None and c.twin.result:
            # Progress lines (ridge probe's) that the same run on a pipe printed too are not the error.
            progress = set(c.twin.result["stderr"].splitlines())
            err_lines = [l for l in err_lines if l.startswith("ridge:") or l not in progress]
        gib = (c.as_limit or 0) / (1 << 30)
        if r["hung"]:
            if c.judge == "huge" and len(r["stdout"].splitlines()) >= 2:
                long_runs.append(c)
            elif c.family == "jit":
                brk(c, "hang", f"still running after {r['seconds']:.0f} s, past twice the JIT compile deadline "
                               f"({SETTINGS['jit_deadline']:.0f} s): a deadline per kernel, or none")
            else:
                brk(c, "hang", f"still running after {r['seconds']:.0f} s")
            continue
        if rc is not None and rc < 0:
            brk(c, "signal", f"killed by signal {signal.Signals(-rc).name if -rc in signal.valid_signals() else -rc}"
                + (f" (peak RSS {r['rss'] >> 20} MiB)" if r.get("rss") else ""))
            continue
        oom = rc == 1 and "out of memory" in r["stderr"]
        if oom and c.as_limit:
            brk(c, "memory", f"out of memory under a {gib:.0f} GiB address-space limit: not refused before "
                             f"allocating (peak RSS {r['rss'] >> 20} MiB)")
        # RIDGE_TEST_DIE_AT_STEP at a step the run reaches does what it is for (docs/core.md): the rank
        # ends with status 3 and its line, as a crash would. Not a break.
        injected = c.family == "env" and c.option.startswith("RIDGE_TEST_DIE") and rc == 3 \
            and "test-only fault injection" in r["stderr"]
        judge_contract(brk, c, r, rc, err_lines, exit_judged=(oom and bool(c.as_limit)) or injected)
        for p in r.get("post", []):
            brk(c, "tokenizer-broken", p)
        twin = env_by.get((c.command, c.option, ENV_SAME_VALUE.get(c.kind))) if c.family == "env" else None
        if twin is not None and not twin.result["hung"] and rc in (0, 2) and twin.result["rc"] in (0, 2) \
                and (rc == 0) != (twin.result["rc"] == 0):
            value = r.get("env", {}).get(c.option, "")
            brk(c, "spelling", f"{c.option}={value!r} answered exit {rc}, "
                               f"{c.option}={twin.result.get('env', {}).get(c.option, '')!r} exit {twin.result['rc']}")
        if c.max_rss and r.get("rss", 0) > c.max_rss:
            brk(c, "memory", f"peak RSS {r['rss'] >> 20} MiB, above the {c.max_rss >> 20} MiB allowed")
        if c.max_seconds and r["seconds"] > c.max_seconds:
            what = "finished" if c.family == "jit" else "answered"
            brk(c, "slow", f"{what} after {r['seconds']:.1f} s, past the {c.max_seconds:.0f} s allowed"
                + (" (twice the JIT compile deadline)" if c.family == "jit" else ""))
        if rc == 0:
            why = {"cross": "an output onto an input of the same command accepted",
                   "deep": "JSON nested this deep accepted",
                   "huge-must": "a size past memory accepted"}
            if c.must_refuse and c.judge != "knob":
                brk(c, "accepted", why.get(c.family, why.get(c.judge, "accepted")))
            if c.judge == "knob" and c.must_refuse:
                brk(c, "accepted", f"{c.option}={r['env'].get(c.option, '')!r} accepted")
            if c.judge == "knob-zero" and not is_switch.get(c.option, False):
                brk(c, "accepted", f"{c.option}=0 accepted (it is not a 0/1 switch)")
            if c.judge == "full" and c.twin is not None and c.twin.result and c.twin.result["rc"] == 0 \
                    and c.twin.result["stdout"].strip():
                brk(c, "stdout-lost", "exit 0 with its output lost: stdout is /dev/full (ENOSPC)")
            if c.family == "env" and c.judge != "env-base":
                base = env_base.get(c.command)
                before = set(base["stderr"].splitlines()) if base else set()
                # ridge probe's own progress lines ("probe: peak fp32 (vfmadd231ps ymm)") name the kernels of
                # the path: under RIDGE_ISA they differ from the base run's, and are still ridge's.
                own = ("ridge", "probe: ") if c.command == "probe" else ("ridge",)
                foreign = [l for l in r["stderr"].splitlines() if l.strip() and not l.startswith(own)
                           and l not in before]
                if foreign:
                    brk(c, "stderr", f"exit 0 with a line that is not ridge's: {foreign[0][:120]!r}")
        alone = "mpirun" in DESCRIPTIONS.get(c.command, "") and not r.get("mpirun")
        if alone and rc == 2 and len(err_lines) == 1 and "mpirun" in err_lines[0]:
            # An MPI-only command run alone answers every case with its own line (run with --mpi N).
            continue
        if rc == 2 and c.names and len(err_lines) == 1 and err_lines[0] != base_line.get(c.command):
            line = err_lines[0]
            value = r.get("env", {}).get(c.option, "") if c.judge == "path-knob" else ""
            words = [w for w in c.names if w] + ([value] if len(value) > 3 else [])
            if not any(w in line for w in words):
                brk(c, "unnamed-flag", f"the line names none of: {', '.join(w for w in words[:4])}")
    for c in long_runs:
        print(f"hostile: not a break: {c.command} {c.option} ({c.kind}) was still printing progress at the timeout",
              file=sys.stderr)
    return breaks


def documents_negative(opt):
    """An option whose default or help gives a negative value a meaning (generate --eos: '-1: none')."""
    return (opt.default or "").startswith("-") or bool(re.search(r"(^|[\s(])-1\b", opt.desc))


def is_folder_output(opt):
    """An output that is a folder (data train-bpe -o, bench tokenizer --cache-dir): a directory is its due."""
    return opt.is_output() and (opt.name.endswith("-dir") or bool(re.search(r"\b(folder|directory)\b", opt.desc)))


def value_of(kind):
    for k, v in CALIBRATION + NUMBER_VALUES:
        if k == kind:
            return v
    return kind


# ---------------------------------------------------------------------------------------------- main


def shell_line(binary, argv):
    def q(a):
        return a if re.fullmatch(r"[\w./=,:+-]+", a) else "'" + a.replace("'", "'\\''") + "'"
    return " ".join(q(a) for a in ["ridge"] + argv)


def default_jit_deadline():
    """The JIT's compile deadline, from include/ridge/jit.hpp (compile_timeout_s), else 60 s."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        with open(os.path.join(here, "..", "include", "ridge", "core", "jit.hpp")) as f:
            m = re.search(r"compile_timeout_s\s*=\s*(\d+)", f.read())
            if m:
                return float(m.group(1))
    except OSError:
        pass
    return 60.0


def has_avx2():
    try:
        with open("/proc/cpuinfo") as f:
            return bool(re.search(r"^flags\s*:.*\bavx2\b", f.read(), re.M))
    except OSError:
        return False


def repro(b):
    """A shell line that reproduces a break (run in a copy of the case's folder)."""
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in b.get("env", {}).items())
    line = shell_line("", b["argv"])
    if b.get("stdout_to"):
        line += " > " + b["stdout_to"]
    return (env + " " if env else "") + line


def main():
    ap = argparse.ArgumentParser(description="hostile harness for the ridge CLI (docs/contract.md)")
    ap.add_argument("--binary", default="build/release/ridge", help="the ridge binary (default build/release/ridge)")
    ap.add_argument("--commands", default="", help="comma-separated command prefixes to run (e.g. 'roofline,hw show')")
    ap.add_argument("--attacks", default="all",
                    help="comma-separated families: sweep (one option at a time), " + ", ".join(ATTACKS) +
                         "; 'all' (the default) is every one")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random values and of --max-cases' sample")
    ap.add_argument("--max-cases", type=int, default=0,
                    help="run at most N cases of the sweep, sampled with --seed (0: all); attacks always run")
    ap.add_argument("--workers", "-j", type=int, default=2, help="parallel runs (default 2; the machine has 2 cores)")
    ap.add_argument("--timeout", type=float, default=15.0, help="seconds before a run counts as a hang")
    ap.add_argument("--jit-deadline", type=float, default=0.0,
                    help="the JIT's compile deadline in seconds (default: compile_timeout_s of "
                         "include/ridge/jit.hpp, else 60); a jit attack may take twice that")
    ap.add_argument("--deep-depth", type=int, default=300000, help="nesting of the deep JSON (default 300000)")
    ap.add_argument("--huge-as-gib", type=float, default=8.0,
                    help="address-space limit of each huge case, GiB (default 8: prlimit --as)")
    ap.add_argument("--huge-rss-mib", type=float, default=2048.0,
                    help="peak RSS above which a huge case breaks, MiB (default 2048)")
    ap.add_argument("--huge-seconds", type=float, default=10.0,
                    help="seconds within which a huge size must be refused (default 10)")
    ap.add_argument("--pretoken-mib", type=int, default=1024,
                    help="size of the one-pre-token text file of the huge attack, MiB (default 1024)")
    ap.add_argument("--json", action="store_true", help="print one JSON document (summary, breaks) on stdout")
    ap.add_argument("--keep", action="store_true", help="keep each case's folder (under --work)")
    ap.add_argument("--work", default="", help="folder for the cases (default: a temporary one)")
    ap.add_argument("--list", action="store_true", help="print the discovered commands and options and stop")
    ap.add_argument("--count", action="store_true", help="print the runs per command and family, and stop (runs none)")
    ap.add_argument("--mpi", type=int, default=0, metavar="N",
                    help="run the commands whose help names mpirun under 'mpirun -np N' (default 0: alone)")
    args = ap.parse_args()

    binary = os.path.abspath(args.binary)
    # The checkout's commit when the run starts (a commit made during a long run is not the binary's).
    commit = ""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, cwd=os.path.dirname(binary)).stdout.decode().strip()
    except OSError:
        pass
    if not os.access(binary, os.X_OK):
        ap.error(f"--binary: '{args.binary}' is not an executable")
    if args.workers < 1 or args.workers > 64:
        ap.error("--workers: expected 1 .. 64")
    if args.max_cases < 0:
        ap.error("--max-cases: expected 0 (all) or more")
    if not (args.timeout > 0):
        ap.error("--timeout: expected seconds > 0")
    families = [f.strip() for f in args.attacks.split(",") if f.strip()]
    if "all" in families:
        families = list(FAMILIES)
    bad = [f for f in families if f not in FAMILIES]
    if bad or not families:
        ap.error(f"--attacks: '{args.attacks}' (accepted: all, {', '.join(FAMILIES)})")
    if args.deep_depth < 1 or args.huge_as_gib <= 0 or args.huge_rss_mib <= 0 or args.huge_seconds <= 0 \
            or args.pretoken_mib < 1 or args.jit_deadline < 0:
        ap.error("--deep-depth, --huge-*, --pretoken-mib: expected positive numbers")
    SETTINGS.update(deep_depth=args.deep_depth, jit_deadline=args.jit_deadline or default_jit_deadline(),
                    huge_as=int(args.huge_as_gib * (1 << 30)), huge_rss=int(args.huge_rss_mib * (1 << 20)),
                    huge_seconds=args.huge_seconds, pretoken_bytes=args.pretoken_mib << 20, avx2=has_avx2())

    if args.mpi:
        MPI["ranks"] = args.mpi
        MPI["mpirun"] = shutil.which("mpirun") or ""
        if args.mpi < 0 or not MPI["mpirun"]:
            ap.error("--mpi: needs N >= 1 and mpirun on PATH")
    leaves = discover(binary)
    if args.commands:
        wanted = [w.strip() for w in args.commands.split(",") if w.strip()]
        leaves = {k: v for k, v in leaves.items() if any(k == w or k.startswith(w + " ") for w in wanted)}
        if not leaves:
            ap.error(f"--commands: '{args.commands}' names no command")
    if args.list:
        print(json.dumps({k: [o.to_json() for o in v] for k, v in leaves.items()}, indent=2))
        return 0
    LEAVES.update(leaves)
    env_variables(binary)

    work = args.work or tempfile.mkdtemp(prefix="ridge-hostile.")
    os.makedirs(work, exist_ok=True)
    fixture_root = os.path.join(work, "fixtures")
    make_shared(os.path.join(fixture_root, "_shared"), binary)
    for command in leaves:
        make_fixture(os.path.join(fixture_root, command.replace(" ", "_")), binary, command)
    discover_axes(binary, leaves, os.path.join(fixture_root, next(iter(leaves)).replace(" ", "_")))
    if "ridge" not in leaves:
        make_fixture(os.path.join(fixture_root, "ridge"), binary, "ridge")

    rng = random.Random(args.seed)
    cases = make_cases(leaves, rng) if "sweep" in families else []
    # Top-level misuse: no command, an unknown one, an unknown subcommand.
    if not args.commands and "sweep" in families:
        for kind, argv in [("no-command", []), ("unknown-command", ["bogus"]), ("empty-command", [""]),
                           ("unknown-flag", ["--bogus"])] + \
                [(f"unknown-sub {c.split()[0]}", [c.split()[0], "bogus"]) for c in leaves if " " in c]:
            cases.append(Case("ridge", "", kind, argv))
    if "sweep" in families:
        for command in leaves:
            cases.append(Case(command, "", "unknown-option", base_for(command) + ["--hostile-bogus"]))
            cases.append(Case(command, "", "extra-positional", base_for(command) + ["extra-word"]))
    seen = set()
    unique = []
    for c in cases:
        k = c.key()
        if k not in seen:
            seen.add(k)
            unique.append(c)
    cases = unique
    if args.max_cases and len(cases) > args.max_cases:
        # Keep the base and calibration runs: the judgement of the others needs them.
        must = [c for c in cases if c.kind == "base" or c.kind in dict(CALIBRATION) or c.kind == "wrong-type"
                or c.kind == "fraction"]
        rest = [c for c in cases if c not in must]
        rng.shuffle(rest)
        cases = must + rest[:max(0, args.max_cases - len(must))]
    attacks = attack_cases([f for f in families if f != "sweep"], leaves, fixture_root, not args.commands)
    for c in attacks:
        k = c.key()
        if k not in seen:
            seen.add(k)
            cases.append(c)
    if "jit" in families and not SETTINGS["avx2"]:
        print("hostile: no AVX2 here: the jit attack (the JIT serves the AVX2 decode path) is left out",
              file=sys.stderr)
    # The slow ones (a hanging compiler waits out a deadline) first, so the rest fill the other workers.
    cases.sort(key=lambda c: 0 if c.family == "jit" else 1)
    if args.count:
        table = {}
        for c in cases:
            table.setdefault(c.command, {f: 0 for f in families})[c.family] += 1
        width = max([len(k) for k in table] + [7])
        print("  " + "command".ljust(width) + "".join(f"{f:>8}" for f in families) + f"{'total':>8}")
        for command in sorted(table):
            print("  " + command.ljust(width) + "".join(f"{table[command][f]:>8}" for f in families)
                  + f"{sum(table[command].values()):>8}")
        print("  " + "total".ljust(width) + "".join(f"{sum(1 for c in cases if c.family == f):>8}" for f in families)
              + f"{len(cases):>8}")
        if not args.work and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        return 0

    started = time.monotonic()
    done = 0
    lock = threading.Lock()

    def progress(c):
        nonlocal done
        with lock:
            done += 1
            if sys.stderr.isatty() and done % 25 == 0:
                sys.stderr.write(f"\rhostile: {done}/{len(cases)} cases")
                sys.stderr.flush()
            elif not sys.stderr.isatty() and done % 500 == 0:
                sys.stderr.write(f"hostile: {done}/{len(cases)} cases, {time.monotonic() - started:.0f} s\n")
                sys.stderr.flush()

    # The runs use a copy, so a rebuild while the harness runs changes nothing under it.
    runner = os.path.join(work, "ridge")
    shutil.copy2(binary, runner)

    def guarded(c):
        try:
            return run_case(c, runner, fixture_root, work, max(args.timeout, TIMEOUTS.get(c.command, 0.0)), args.keep)
        except Exception as e:  # a harness problem (a full disk, a fixture that failed): reported, not a break
            c.result = {"rc": None, "hung": False, "seconds": 0, "stdout": "", "stderr": "", "changed": [],
                        "created": [], "argv": c.argv, "harness_error": f"{type(e).__name__}: {e}"}
            return c

    with concurrent.futures.ThreadPoolExecutor(max_workers=args.workers) as pool:
        futures = [pool.submit(guarded, c) for c in cases]
        for f in concurrent.futures.as_completed(futures):
            progress(f.result())
    if sys.stderr.isatty():
        sys.stderr.write("\n")
    elapsed = time.monotonic() - started
    breaks = judge([c for c in cases if c.family == "sweep"], leaves) + \
        judge_attacks([c for c in cases if c.family != "sweep"])
    if not args.work and not args.keep:
        shutil.rmtree(work, ignore_errors=True)

    by_cause = {}
    for b in breaks:
        by_cause.setdefault(b["cause"], []).append(b)
    runs = {}
    for c in cases:
        runs.setdefault(c.command, {f: 0 for f in families})[c.family] += 1
    breaks_by = {}
    for b in breaks:
        breaks_by.setdefault(b["command"], {f: 0 for f in families})[b["family"]] += 1
    summary = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "binary": binary,
        "commit": commit,
        "commands": len(leaves),
        "options": sum(len(v) for v in leaves.values()),
        "attacks": families,
        "cases": len(cases),
        "breaks": len(breaks),
        "by_cause": {k: len(v) for k, v in sorted(by_cause.items())},
        "by_family": {f: {"runs": sum(1 for c in cases if c.family == f),
                          "breaks": sum(1 for b in breaks if b["family"] == f)} for f in families},
        "runs_by_command": runs,
        "breaks_by_command": breaks_by,
        "seconds": round(elapsed, 1),
        "harness_errors": sum(1 for c in cases if c.result.get("harness_error")),
        "seed": args.seed,
        "settings": {k: v for k, v in SETTINGS.items()},
    }
    if args.json:
        print(json.dumps({"summary": summary, "breaks": breaks}, indent=2))
    else:
        print(f"ridge hostile harness: {summary['cases']} cases over {summary['commands']} commands "
              f"({summary['options']} options) in {summary['seconds']} s, commit {commit or '?'}, seed {args.seed}")
        print(f"breaks: {len(breaks)}")
        errors = [c for c in cases if c.result.get("harness_error")]
        if errors:
            print(f"harness errors (cases that did not run, not breaks): {len(errors)}, e.g. "
                  f"{errors[0].command} {errors[0].option} {errors[0].kind}: {errors[0].result['harness_error']}")
        width = max([len(k) for k in runs] + [7])
        print("\nruns (breaks) per command and family:")
        print("  " + "command".ljust(width) + "".join(f"{f:>14}" for f in families) + f"{'total':>14}")
        for command in sorted(runs):
            row = runs[command]
            bb = breaks_by.get(command, {})
            cells = "".join(f"{(str(row[f]) + (f' ({bb[f]})' if bb.get(f) else '')):>14}" for f in families)
            tb = sum(bb.values())
            print("  " + command.ljust(width) + cells + f"{(str(sum(row.values())) + (f' ({tb})' if tb else '')):>14}")
        tot = summary["by_family"]
        def cell(n, b):
            return f"{str(n) + (f' ({b})' if b else ''):>14}"
        print("  " + "total".ljust(width) + "".join(cell(tot[f]["runs"], tot[f]["breaks"]) for f in families)
              + cell(len(cases), len(breaks)))
        for cause, items in sorted(by_cause.items()):
            print(f"\n== {cause}: {len(items)}")
            groups = {}
            for b in items:
                groups.setdefault((b["family"], b["command"], b["option"]), []).append(b)
            for (family, command, option), group in sorted(groups.items()):
                b = group[0]
                err = b["stderr"].strip().splitlines()
                last = err[-1] if err else ""
                kinds = ", ".join(sorted({g["kind"] for g in group}))
                print(f"  [{family}] ridge {command} {option}: {len(group)} ({kinds[:400]})")
                print(f"      e.g. {repro(b)[:300]}")
                print(f"      {b['why']}; exit {b['rc']}{'; ' + last[:200] if last else ''}")
    return 1 if breaks else 0


if __name__ == "__main__":
    sys.exit(main())
