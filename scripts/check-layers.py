#!/usr/bin/env python3
"""Fails on an include that runs upward or around serving.

The layers and what each may use (docs/architecture.md):

    core
    gguf      -> core
    runtime   -> core
    backends  -> runtime
    text      -> gguf
    models    -> gguf, runtime
    engine    -> models
    grammar   -> engine, text
    dist      -> engine
    serving   -> engine, grammar, text, backends

and, above serving, the front ends: the CLI (tools/tessera, which also
runs quantize, synth, inspect, perplexity and bench on models and the
engine), the server (tools/server) and the Node addon (bindings/node),
which reach models only through serving.

CMake already refuses most wrong includes: a layer's headers are only on the
include path of the layers above it. This check also catches what the
include path alone lets through: a public header reaching a layer its
library links only privately, a relative path into another layer's private
folder ("../engine/x.h"), and a front end going around serving.

Usage: scripts/check-layers.py [REPO]   (exit 0: clean; 1: violations, listed)
       scripts/check-layers.py --self-test   (the check catches each kind of violation)
"""
import os
import re
import sys

ALLOWED = {
    "core": set(),
    "gguf": {"core"},
    "runtime": {"core"},
    "backends": {"runtime"},
    "text": {"gguf"},
    "models": {"gguf", "runtime"},
    "engine": {"models"},
    "grammar": {"engine", "text"},
    "dist": {"engine"},
    "serving": {"engine", "grammar", "text", "backends"},
}
# Front ends: folder -> the layers they may include directly.
FRONT_ENDS = {
    "tools/tessera": {"serving", "dist", "grammar", "text", "engine", "models", "gguf",
                      "backends", "runtime", "core"},
    "tools/server": {"serving", "grammar", "text", "core"},
    "bindings/node/src": {"serving", "grammar", "text", "core"},
}
SOURCE = re.compile(r"\.(h|hpp|cpp|cc|cu|cuh|c)$")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)


def closure(layer):
    """Every layer `layer` may reach, itself included."""
    seen, todo = {layer}, [layer]
    while todo:
        for dep in ALLOWED[todo.pop()]:
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def layer_of_include(path):
    """The layer a quoted include names, or None for a system or local header."""
    m = re.match(r"tessera/(\w+)/", path)
    if m:
        return m.group(1)
    return None


def files_under(root, rel):
    base = os.path.join(root, rel)
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = [d for d in dirnames if d not in ("node_modules", "build")]
        for f in filenames:
            if SOURCE.search(f):
                yield os.path.join(dirpath, f)


def check(root):
    problems = []
    src = os.path.join(root, "src")
    layers = sorted(d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)))
    for d in layers:
        if d not in ALLOWED:
            problems.append(f"src/{d}: a folder that is no layer (add it to scripts/check-layers.py)")

    def visit(path, allowed, who, unit_root):
        """Checks one file of layer or front end `who`, whose own files are under unit_root."""
        rel = os.path.relpath(path, root)
        text = open(path, encoding="utf-8", errors="replace").read()
        for n, line in enumerate(text.splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            inc = m.group(1)
            target = layer_of_include(inc)
            if target is not None:
                if target not in allowed:
                    problems.append(f"{rel}:{n}: {who} includes {inc} ({target}): {who} may use "
                                    f"{', '.join(sorted(allowed - {who})) or 'nothing else'}")
                continue
            if '"' not in line:
                continue  # <system header>
            # A quoted include is the unit's own: beside the file or under its root.
            found = [os.path.normpath(os.path.join(d, inc))
                     for d in (os.path.dirname(path), unit_root)]
            found = [f for f in found if os.path.exists(f)]
            if not found:
                problems.append(f"{rel}:{n}: {inc} is not a file of {who} "
                                f"(another layer's private header?)")
            elif not any(f.startswith(unit_root + os.sep) for f in found):
                problems.append(f"{rel}:{n}: {inc} reaches outside {os.path.relpath(unit_root, root)}")

    for layer in layers:
        if layer not in ALLOWED:
            continue
        unit = os.path.join(src, layer)
        for path in files_under(root, f"src/{layer}"):
            visit(path, closure(layer), layer, unit)
    # The server's files are included as "server/x.h" from tools/, the CLI's
    # and the addon's from their own folder.
    units = {"tools/tessera": ("tessera", "tools"), "tools/server": ("server", "tools"),
             "bindings/node/src": ("node", "bindings/node/src")}
    for folder, allowed in FRONT_ENDS.items():
        who, unit = units[folder]
        for path in files_under(root, folder):
            visit(path, allowed | {who}, who, os.path.join(root, unit))
    return problems


def self_test():
    """The check on a made-up tree with one wrong include of each kind."""
    import tempfile
    files = {
        "src/core/a.cpp": '#include "tessera/engine/engine.h"\n',        # upward
        "src/engine/b.cpp": '#include "../serving/c.h"\n',                # into a private folder
        "src/serving/c.h": "",
        "src/models/d.cpp": '#include "engine/e.h"\n',                    # another layer's private header
        "src/engine/e.h": "",
        "tools/server/f.cpp": '#include "tessera/models/model.h"\n',      # around serving
        "bindings/node/src/g.cpp": '#include "tessera/gguf/gguf.h"\n',    # around serving
        "src/grammar/h.cpp": '#include "tessera/engine/engine.h"\n#include <vector>\n',  # fine
        "src/other/i.cpp": "",                                              # no layer
    }
    want = ["src/core/a.cpp:1", "src/engine/b.cpp:1", "src/models/d.cpp:1", "tools/server/f.cpp:1",
            "bindings/node/src/g.cpp:1", "src/other"]
    with tempfile.TemporaryDirectory() as tmp:
        for rel, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(tmp, rel)), exist_ok=True)
            with open(os.path.join(tmp, rel), "w") as f:
                f.write(text)
        got = check(tmp)
    missed = [w for w in want if not any(p.startswith(w) for p in got)]
    extra = [p for p in got if not any(p.startswith(w) for w in want)]
    for m in missed:
        print(f"self-test: not caught: {m}")
    for e in extra:
        print(f"self-test: wrongly reported: {e}")
    print(f"check-layers self-test: {len(want) - len(missed)} of {len(want)} caught, "
          f"{len(extra)} false")
    return 1 if missed or extra else 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f"check-layers: {len(problems)} include(s) against the layer map")
        return 1
    print("check-layers: every include follows the layer map")
    return 0


if __name__ == "__main__":
    sys.exit(main())
