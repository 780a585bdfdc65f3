#!/usr/bin/env python3
"""The layering of the modules checked on the tree: no file includes a module above its own.

Run as a ctest test (CMakeLists.txt):
  layers.py ROOT          scans the checkout at ROOT against ROOT/cmake/layers.txt; prints one line per
                          violation and exits 1 if there is any
  layers.py --self-test   runs the scan over two made-up trees (one with a violation of every kind, one
                          clean) and exits 1 unless it reports exactly what each holds

What it reads: every C/C++ file under src/, include/ridge/, apps/, bench/, python/ and tests/, its
`#include` lines naming a module as "ridge/<module>..." or "<module>/..." (or a relative path), and
CMakeLists.txt's RIDGE_MODULES and RIDGE_DEPS_<module>, the link-level form of the same order.
"""
import os
import re
import sys
import tempfile

SOURCE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp", ".hxx", ".inc", ".ipp")
WALKED = ("src", "include", "apps", "bench", "python", "tests")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')


class Layers:
    """cmake/layers.txt: levels (lowest first), aliases and allowed sibling includes."""

    def __init__(self, path):
        self.path = path
        self.level = {}  # module -> its line's index
        self.alias = {}  # other name -> module
        self.allowed = set()  # (module, sibling it may include)
        levels = 0
        with open(path, encoding="utf-8") as f:
            for n, raw in enumerate(f, 1):
                words = raw.split("#", 1)[0].split()
                if not words:
                    continue
                if words[0] == "alias" and len(words) == 3:
                    self.alias[words[1]] = words[2]
                elif words[0] == "allow" and len(words) == 3:
                    self.allowed.add((words[1], words[2]))
                elif words[0] in ("alias", "allow"):
                    raise SystemExit(f"{path}:{n}: expected '{words[0]} NAME MODULE'")
                else:
                    for w in words:
                        if w in self.level:
                            raise SystemExit(f"{path}:{n}: module '{w}' is on two lines")
                        self.level[w] = levels
                    levels += 1
        for name, module in self.alias.items():
            if module not in self.level:
                raise SystemExit(f"{path}: alias {name} names '{module}', which is on no line")

    def may_include(self, own, other):
        """Whether a file of module `own` may include module `other` (both modules, not aliases)."""
        if self.level[other] == self.level[own]:
            return other == own or (own, other) in self.allowed
        return self.level[other] < self.level[own]

    def module(self, name):
        """The module `name` stands for, or None when it is not one of ridge's."""
        name = self.alias.get(name, name)
        return name if name in self.level else None


def file_module(rel):
    """The name (module or alias) a file belongs to, from its path relative to the root."""
    parts = rel.split("/")
    if parts[0] in ("apps", "bench"):
        return "apps"
    if parts[0] == "python":
        return "python"
    if parts[0] == "include" and len(parts) > 2 and parts[1] == "ridge":
        return os.path.splitext(parts[2])[0]
    if parts[0] in ("src", "tests") and len(parts) > 2:
        return parts[1]
    return None


def include_module(inc, rel):
    """The name an include line names (None for a header outside ridge or beside the file)."""
    if inc.startswith(("./", "../")):
        target = os.path.normpath(os.path.join(os.path.dirname(rel), inc)).replace(os.sep, "/")
        return file_module(target)
    parts = inc.split("/")
    if len(parts) == 1:
        return None  # beside the including file: its own module
    if parts[0] == "ridge":
        return os.path.splitext(parts[1])[0]
    return parts[0]


def cmake_lists(root):
    """RIDGE_MODULES (in order) and RIDGE_DEPS_<module> (module names) from CMakeLists.txt."""
    with open(os.path.join(root, "CMakeLists.txt"), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^\s*set\(RIDGE_MODULES\s([^)]*)\)", text, re.M)
    modules = m.group(1).split() if m else []
    deps = {}
    for m in re.finditer(r"^\s*set\(RIDGE_DEPS_(\w+)\s([^)]*)\)", text, re.M):
        deps[m.group(1)] = [d.removeprefix("ridge_") for d in m.group(2).replace('""', "").split()]
    return modules, deps


def source_files(root):
    """The C/C++ files of the walked folders, as paths relative to `root`, in a stable order."""
    for top in WALKED:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                if name.endswith(SOURCE_SUFFIXES):
                    yield os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")


def scan_file(root, rel, layers, table, out, includes):
    """Appends the violations of one file to `out`; records a library file's includes in `includes`."""
    own_name = file_module(rel)
    own = layers.module(own_name) if own_name else None
    if own is None:
        out.append(f"{rel}: module '{own_name}' is on no line of {table}")
        return
    library = rel.startswith(("src/", "include/"))
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        lines = f.readlines()
    for n, line in enumerate(lines, 1):
        m = INCLUDE.match(line)
        name = include_module(m.group(1), rel) if m else None
        if name is None or name == own_name:
            continue
        other = layers.module(name)
        if other is None:
            if m.group(1).startswith(("ridge/", "./", "../")):
                out.append(f"{rel}:{n}: includes {m.group(1)}, of module '{name}', on no line of {table}")
            continue  # a third-party header (fmt/, nlohmann/, gtest/, ...)
        if other == own:
            continue
        if library:
            includes.setdefault(own, {}).setdefault(other, f"{rel}:{n}")
        if layers.level[other] > layers.level[own]:
            out.append(f"{rel}:{n}: module {own} includes {other} (above it)")
        elif not layers.may_include(own, other):
            out.append(f"{rel}:{n}: module {own} includes {other} (beside it, on its line of {table})")


def scan(root):
    """Every violation in the tree at `root`, one line each: the files' in path order, then CMake's."""
    layers = Layers(os.path.join(root, "cmake", "layers.txt"))
    table = os.path.relpath(layers.path, root)
    out = []
    includes = {}  # module -> {module its library files include: the first "file:line"}
    for rel in source_files(root):
        scan_file(root, rel, layers, table, out, includes)
    return out + check_cmake(root, layers, table, includes)


def check_cmake(root, layers, table, includes):
    """The link-level layering: RIDGE_MODULES in layer order, RIDGE_DEPS_<m> exactly what m includes."""
    out = []
    modules, deps = cmake_lists(root)
    if not modules:
        return ["CMakeLists.txt: no set(RIDGE_MODULES ...) found"]
    previous = None
    for name in modules:
        mod = layers.module(name)
        if mod is None:
            out.append(f"CMakeLists.txt: RIDGE_MODULES lists '{name}', which is on no line of {table}")
            continue
        if previous and layers.level[mod] < layers.level[previous]:
            out.append(f"CMakeLists.txt: RIDGE_MODULES lists {name} after {previous}, a higher module")
        previous = mod
    for name in modules:
        mod = layers.module(name)
        if mod is None:
            continue
        if name not in deps:
            out.append(f"CMakeLists.txt: RIDGE_MODULES lists {name} but sets no RIDGE_DEPS_{name}")
            continue
        declared = set()
        for d in deps[name]:
            dep = layers.module(d)
            if dep is None:
                out.append(f"CMakeLists.txt: RIDGE_DEPS_{name} names ridge_{d}, on no line of {table}")
            elif dep == mod or not layers.may_include(mod, dep):
                out.append(f"CMakeLists.txt: RIDGE_DEPS_{name} names ridge_{d}, not below {mod}")
            else:
                declared.add(dep)
                if dep not in includes.get(mod, {}):
                    out.append(f"CMakeLists.txt: RIDGE_DEPS_{name} names ridge_{d}, which no file of {mod} "
                               "includes")
        for other, where in sorted(includes.get(mod, {}).items()):
            if other not in declared and layers.may_include(mod, other):
                out.append(f"{where}: module {mod} includes {other}, which RIDGE_DEPS_{name} does not name")
    return out


def write_tree(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


SELF_TEST_LAYERS = """# made up for the self-test
low
mid1 mid2
high
apps python
alias old high  # an old name
allow mid2 mid1
"""
SELF_TEST_CLEAN = {
    "cmake/layers.txt": SELF_TEST_LAYERS,
    "CMakeLists.txt": 'set(RIDGE_MODULES low mid1 mid2 old)\nset(RIDGE_DEPS_low "")\n'
    "set(RIDGE_DEPS_mid1 ridge_low)\nset(RIDGE_DEPS_mid2 ridge_low ridge_mid1)\n"
    "set(RIDGE_DEPS_old ridge_low ridge_mid2)\n",
    "include/ridge/low.hpp": "#pragma once\n#include <vector>\n",
    "include/ridge/mid1/a.hpp": '#include "ridge/low.hpp"\n',
    "src/mid1/a.cpp": '#include "ridge/mid1/a.hpp"\n#include "helper.hpp"\n#include <fmt/format.h>\n',
    "src/mid2/b.cpp": '#include "mid1/a.hpp"  // allowed by the table\n  #  include <ridge/low.hpp>\n',
    "src/old/c.cpp": '#include "ridge/mid2.hpp"\n// #include "python/x.hpp" is a comment\n'
    '#include "low/x.hpp"\n',
    "apps/cli/main.cpp": '#include "ridge/high/x.hpp"\n#include "ridge/old.hpp"\n'
    '#include "../../bench/b.hpp"\n',
    "bench/b.cpp": '#include "mid2/b.hpp"\n',
    "python/src/m.cpp": '#include "ridge/high.hpp"\n',
    "tests/mid1/t.cpp": '#include "../low/t.hpp"\n#include "ridge/mid1/a.hpp"\n',
}
SELF_TEST_BAD = {
    "cmake/layers.txt": SELF_TEST_LAYERS,
    "CMakeLists.txt": 'set(RIDGE_MODULES low high mid1 mid2 extra)\nset(RIDGE_DEPS_low "")\n'
    "set(RIDGE_DEPS_mid1 ridge_low ridge_mid2)\nset(RIDGE_DEPS_mid2 ridge_low)\n",
    "src/low/a.cpp": '#include "ridge/low.hpp"\n#include "mid1/x.hpp"\n',
    "include/ridge/mid1.hpp": '#pragma once\n#include "ridge/old/h.hpp"\n',
    "src/mid1/b.cpp": '#include "mid2/y.hpp"\n#include "ridge/nosuch.hpp"\n',
    "src/old/e.cpp": '#include "python/p.hpp"\n',
    "src/newmod/f.cpp": "int f();\n",
    "python/src/b.cpp": '#include "../../apps/x.hpp"\n',
    "src/mid2/g.cpp": '#include "mid1/g.hpp"  // allowed, but not declared in RIDGE_DEPS_mid2\n',
    "tests/mid2/t.cpp": '#include "ridge/high.hpp"\n',
}
SELF_TEST_BAD_WANT = [
    "include/ridge/mid1.hpp:2: module mid1 includes high (above it)",
    "python/src/b.cpp:1: module python includes apps (beside it, on its line of cmake/layers.txt)",
    "src/low/a.cpp:2: module low includes mid1 (above it)",
    "src/mid1/b.cpp:1: module mid1 includes mid2 (beside it, on its line of cmake/layers.txt)",
    "src/mid1/b.cpp:2: includes ridge/nosuch.hpp, of module 'nosuch', on no line of cmake/layers.txt",
    "src/newmod/f.cpp: module 'newmod' is on no line of cmake/layers.txt",
    "src/mid2/g.cpp:1: module mid2 includes mid1, which RIDGE_DEPS_mid2 does not name",
    "src/old/e.cpp:1: module high includes python (above it)",
    "tests/mid2/t.cpp:1: module mid2 includes high (above it)",
    "CMakeLists.txt: RIDGE_MODULES lists mid1 after high, a higher module",
    "CMakeLists.txt: RIDGE_MODULES lists 'extra', which is on no line of cmake/layers.txt",
    "CMakeLists.txt: RIDGE_DEPS_mid1 names ridge_low, which no file of mid1 includes",
    "CMakeLists.txt: RIDGE_DEPS_mid1 names ridge_mid2, not below mid1",
    "CMakeLists.txt: RIDGE_DEPS_mid2 names ridge_low, which no file of mid2 includes",
    "CMakeLists.txt: RIDGE_MODULES lists high but sets no RIDGE_DEPS_high",
]


def self_test():
    failed = False
    with tempfile.TemporaryDirectory(prefix="ridge-layers-") as tmp:
        for name, files, want in (("clean", SELF_TEST_CLEAN, []), ("bad", SELF_TEST_BAD, SELF_TEST_BAD_WANT)):
            root = os.path.join(tmp, name)
            write_tree(root, files)
            got = scan(root)
            if sorted(got) != sorted(want):
                failed = True
                print(f"self-test, {name} tree: the scan reported", *got, "but should have reported", *want,
                      sep="\n  ")
    print("layers.py self-test:", "FAILED" if failed else "the scan finds each planted violation, no other")
    return 1 if failed else 0


def main(argv):
    if argv == ["--self-test"]:
        return self_test()
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    problems = scan(argv[0])
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} layering problem(s); the order is cmake/layers.txt's")
        return 1
    print("layers.py: every include goes to the file's own module or a lower one (cmake/layers.txt)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
