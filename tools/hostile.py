#!/usr/bin/env python3
"""The hostile harness: tries every option of every `ridge` command as a hostile user would.

Run it before resolving an issue that adds a command or an option (docs/contract.md):

    python3 tools/hostile.py                      # every command, build/release/ridge
    python3 tools/hostile.py --commands roofline,hw --json > run.json

It reads the commands, their subcommands and their options from `ridge --help` and
`ridge CMD [SUB] --help` (nothing here lists options by hand, so it cannot go stale), then runs each
option with hostile values:

  numbers  empty, negative, zero, huge (99999999999999999999), octal-looking (010), nan, inf, -inf,
           1e400, a wrong type ('abc'), trailing junk ('4x'), and more (see NUMBER_VALUES)
  paths    an input of the same command (an output naming an input, in several spellings), a
           directory, a FIFO, a dangling symlink, a read-only file, a name longer than NAME_MAX, a
           path in a missing folder, an empty file, a file of garbage

and judges each run against the contract (one line on stderr starting 'ridge:', exit 2, no file
lost, no hang, no signal). The only hand-written table is BASE: the arguments that make a command
run quickly (tiny model flags, a small sweep, the input files it makes).

Breaks, by cause:
  exit-code        exit status not 0 or 2 (1 is 'internal error' or 'out of memory')
  signal           killed by a signal (SIGSEGV, SIGABRT, SIGBUS, SIGKILL from the OOM killer ...)
  hang             still running after --timeout seconds
  stderr           exit 2, but stderr is not exactly one line starting with 'ridge:'
  internal-error   'internal error' anywhere in stdout or stderr
  input-changed    an input file changed or removed (compared byte for byte)
  accepted         exit 0 for a value that must be refused: nan, inf, empty, junk, a wrong type,
                   1e400 for a number; a negative number; a huge integer; octal 010 read as 8;
                   a directory, a missing file or a name longer than NAME_MAX where a file is read
                   or written (the output written nowhere)
  unnamed-flag     exit 2, but the line does not name the option the user typed

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
NOT_AN_INTEGER = {"huge", "negative-huge", "fraction", "int64-max+1"}

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
}
# Commands whose ordinary runs take longer than --timeout (bench model --predict fits efficiencies
# first, ~50 s): seconds allowed to each of their cases.
TIMEOUTS = {"bench model": 120.0}

# The sweep of each benchmark's --grid-file: the smallest case that still runs.
GRIDS = {
    "bench stream": {"n": ["4K"], "kernel": ["copy"]},
    "bench gemm-dense": {"m": [16], "n": [16], "k": [16], "dtype": ["fp32"], "peer": [0]},
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
    def __init__(self, command, option, kind, argv, note="", writes=False):
        self.writes = writes      # the option writes the file it is given
        self.command = command
        self.option = option      # the option's name, or '' for the base run
        self.kind = kind          # what was tried (a value kind, a path kind)
        self.argv = argv          # arguments after the binary, with {placeholders}
        self.note = note
        self.result = None

    def key(self):
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


INPUTS = {"text": "input.txt", "tokens": "tokens.bin", "grid": "grid.json", "shapes": "shapes.json",
          "chip": "chip.json", "snapshot": "snapshot.json", "vocab": "vocab.json", "merges": "merges.txt"}


def case_env(folder):
    env = dict(os.environ)
    env["RIDGE_HOME"] = os.path.join(folder, "home")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.pop("RIDGE_ISA", None)
    return env


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
    os.makedirs(os.path.join(folder, "sub"))
    os.makedirs(os.path.join(folder, "adir"))
    os.mkfifo(os.path.join(folder, "afifo"))
    os.symlink("does-not-exist.json", os.path.join(folder, "dangling.json"))
    ro = os.path.join(folder, "readonly.json")
    shutil.copy(os.path.join(folder, "chip.json"), ro)
    os.chmod(ro, 0o444)
    open(os.path.join(folder, "empty.json"), "w").close()

    def sub(a):
        def repl(m):
            key = m.group(1)
            if key in INPUTS:
                return INPUTS[key]
            if key == "out":
                return "out/result"
            if key == "dir":
                return "adir"
            if key == "fifo":
                return "afifo"
            if key == "dangling":
                return "dangling.json"
            if key == "readonly":
                return "readonly.json"
            if key == "emptyfile":
                return "empty.json"
            if key == "garbage":
                return "garbage.bin"
            if key == "abs":
                return folder
            kind, _, name = key.partition(":")
            target = INPUTS.get(name, name)
            if kind == "link":
                link = os.path.join(folder, "link-" + target)
                if not os.path.lexists(link):
                    os.symlink(target, link)
                return "link-" + target
            if kind == "hard":
                hard = os.path.join(folder, "hard-" + target)
                if not os.path.exists(hard):
                    os.link(os.path.join(folder, target), hard)
                return "hard-" + target
            if kind == "noext":
                return os.path.splitext(target)[0]
            return m.group(0)

        return re.sub(r"\{([a-z]+(?::[a-z]+)?)\}", repl, a)

    words = [] if case.command == "ridge" else case.command.split()
    argv = words + [sub(a) for a in case.argv]
    os.makedirs(os.path.join(folder, "out"))
    watched = {}
    # The user's files: every input, and the files the path cases name. A file given to an option
    # that writes (--trace readonly.json) is that option's to replace; an input never is.
    targets = {"read-only-file": "readonly.json", "garbage-file": "garbage.bin"}
    own = targets.get(case.kind) if case.writes else None
    for name in (set(INPUTS.values()) | {"garbage.bin", "readonly.json"}) - {own}:
        path = os.path.join(folder, name)
        if os.path.exists(path):
            with open(path, "rb") as f:
                watched[name] = hashlib.sha256(f.read()).hexdigest()
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


def run_case(case, binary, fixture_root, work, timeout, keep):
    folder, argv, watched = prepare(case, fixture_root, work)
    before = listing(folder)
    start = time.monotonic()
    env = case_env(folder)
    prefix = launcher(case.command)
    if prefix:
        env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    proc = subprocess.Popen(prefix + [binary] + argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=folder,
                            env=env, stdin=subprocess.DEVNULL, start_new_session=True)
    hung = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        hung = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
    seconds = time.monotonic() - start
    changed = []
    for name, digest in watched.items():
        path = os.path.join(folder, name)
        if not os.path.exists(path):
            changed.append(f"{name} removed")
            continue
        with open(path, "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() != digest:
                changed.append(f"{name} changed")
    # The files the run wrote (for 'accepted' on an output that cannot be written).
    after = listing(folder)
    created = sorted(f for f, st in after.items() if before.get(f) != st and f not in watched)
    case.result = {
        "rc": None if hung else proc.returncode,
        "hung": hung,
        "seconds": round(seconds, 3),
        "stdout": out.decode(errors="replace").replace(folder, "<case>"),
        "stderr": err.decode(errors="replace").replace(folder, "<case>"),
        "changed": changed,
        "created": created,
        "argv": argv,
        "mpirun": bool(prefix),
    }
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
        breaks.append({"cause": cause, "why": why, "command": case.command, "option": case.option,
                       "kind": case.kind, "argv": case.result["argv"], "rc": case.result["rc"],
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
        if "internal error" in r["stdout"] or "internal error" in r["stderr"]:
            brk(c, "internal-error", "'internal error' in the output")
        if rc not in (0, 2):
            brk(c, "exit-code", f"exit {rc}")
        if rc == 2 and (len(err_lines) != 1 or not err_lines[0].startswith("ridge:")):
            brk(c, "stderr", f"exit 2 with {len(err_lines)} stderr lines" if len(err_lines) != 1
                else "the line does not start with 'ridge:'")
        if r["changed"]:
            brk(c, "input-changed", ", ".join(r["changed"]))
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
            elif c.kind in ("negative", "negative-huge"):
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
        if opt.is_path() and c.kind in ("directory", "too-long-name", "fifo", "trailing-slash") + \
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


def main():
    ap = argparse.ArgumentParser(description="hostile harness for the ridge CLI (docs/contract.md)")
    ap.add_argument("--binary", default="build/release/ridge", help="the ridge binary (default build/release/ridge)")
    ap.add_argument("--commands", default="", help="comma-separated command prefixes to run (e.g. 'roofline,hw show')")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random values and of --max-cases' sample")
    ap.add_argument("--max-cases", type=int, default=0, help="run at most N cases, sampled with --seed (0: all)")
    ap.add_argument("--workers", type=int, default=2, help="parallel runs (default 2; the machine has 2 cores)")
    ap.add_argument("--timeout", type=float, default=15.0, help="seconds before a run counts as a hang")
    ap.add_argument("--json", action="store_true", help="print one JSON document (summary, breaks) on stdout")
    ap.add_argument("--keep", action="store_true", help="keep each case's folder (under --work)")
    ap.add_argument("--work", default="", help="folder for the cases (default: a temporary one)")
    ap.add_argument("--list", action="store_true", help="print the discovered commands and options and stop")
    ap.add_argument("--mpi", type=int, default=0, metavar="N",
                    help="run the commands whose help names mpirun under 'mpirun -np N' (default 0: alone)")
    args = ap.parse_args()

    binary = os.path.abspath(args.binary)
    if not os.access(binary, os.X_OK):
        ap.error(f"--binary: '{args.binary}' is not an executable")
    if args.workers < 1 or args.workers > 64:
        ap.error("--workers: expected 1 .. 64")
    if args.max_cases < 0:
        ap.error("--max-cases: expected 0 (all) or more")
    if not (args.timeout > 0):
        ap.error("--timeout: expected seconds > 0")

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

    work = args.work or tempfile.mkdtemp(prefix="ridge-hostile.")
    os.makedirs(work, exist_ok=True)
    fixture_root = os.path.join(work, "fixtures")
    for command in leaves:
        make_fixture(os.path.join(fixture_root, command.replace(" ", "_")), binary, command)
    discover_axes(binary, leaves, os.path.join(fixture_root, next(iter(leaves)).replace(" ", "_")))

    rng = random.Random(args.seed)
    cases = make_cases(leaves, rng)
    # Top-level misuse: no command, an unknown one, an unknown subcommand.
    if not args.commands:
        for kind, argv in [("no-command", []), ("unknown-command", ["bogus"]), ("empty-command", [""]),
                           ("unknown-flag", ["--bogus"])] + \
                [(f"unknown-sub {c.split()[0]}", [c.split()[0], "bogus"]) for c in leaves if " " in c]:
            cases.append(Case("ridge", "", kind, argv))
        for command in leaves:
            cases.append(Case(command, "", "unknown-option", base_for(command) + ["--hostile-bogus"]))
            cases.append(Case(command, "", "extra-positional", base_for(command) + ["extra-word"]))
    seen = set()
    unique = []
    for c in cases:
        k = (c.command, c.option, c.kind)
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
    fixture_commands = set(leaves) | {"ridge"}
    if "ridge" not in leaves:
        make_fixture(os.path.join(fixture_root, "ridge"), binary, "ridge")

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
    breaks = judge(cases, leaves)
    if not args.work and not args.keep:
        shutil.rmtree(work, ignore_errors=True)

    by_cause = {}
    for b in breaks:
        by_cause.setdefault(b["cause"], []).append(b)
    commit = ""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, cwd=os.path.dirname(binary)).stdout.decode().strip()
    except OSError:
        pass
    summary = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "binary": binary,
        "commit": commit,
        "commands": len(leaves),
        "options": sum(len(v) for v in leaves.values()),
        "cases": len(cases),
        "breaks": len(breaks),
        "by_cause": {k: len(v) for k, v in sorted(by_cause.items())},
        "seconds": round(elapsed, 1),
        "harness_errors": sum(1 for c in cases if c.result.get("harness_error")),
        "seed": args.seed,
    }
    unused = fixture_commands  # noqa: F841 (kept for readers: every command has its own fixture folder)
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
        for cause, items in sorted(by_cause.items()):
            print(f"\n== {cause}: {len(items)}")
            groups = {}
            for b in items:
                groups.setdefault((b["command"], b["option"]), []).append(b)
            for (command, option), group in sorted(groups.items()):
                b = group[0]
                err = b["stderr"].strip().splitlines()
                last = err[-1] if err else ""
                kinds = ", ".join(sorted({g["kind"] for g in group}))
                print(f"  ridge {command} {option}: {len(group)} ({kinds})")
                print(f"      e.g. {shell_line(binary, b['argv'])[:300]}")
                print(f"      {b['why']}; exit {b['rc']}{'; ' + last[:200] if last else ''}")
    return 1 if breaks else 0


if __name__ == "__main__":
    sys.exit(main())
