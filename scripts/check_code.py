#!/usr/bin/env python3
"""check_code.py: the code rules of docs/STYLE.md that a script can keep true.

Checks, for the library (the module folders that cmake/modules.txt lists, and tools, the
command-line tool; not tests, bench, examples or fuzz):
  long      no function body longer than MAX_BODY (100) lines. A function definition is found
            by the Linux brace style that .clang-format enforces: its opening brace is a line
            holding only "{" at column 0 and its body ends at the next line holding only "}" at
            column 0; the body lines are the lines strictly between them. The function's name
            is read from the signature above the brace (for a template instance such as
            `POOL_CAT(maxpool_fwd, SFX)(...)` the first argument of the macro).
  default   no `default:` label directly in a switch over an op enum (sx_cg_op, sx_map_op,
            sx_binary_op, sx_fold_op): docs/STYLE.md wants every op handled by name, so that adding
            an op makes the compiler (-Wswitch) point at every switch that must learn it.
            Heuristic: the switch expression is cast to one of those types, or ends in a field
            named `op` (`n->op`, `x.op`), or is a variable declared with one of those types in
            the function (parameters included).
and, for every C file of the repository (library, tests, bench, examples, fuzz):
  todo      every TODO names an issue number ("TODO(#15)", "TODO (issue 15)").

Known offenders that other work is removing are listed in scripts/check_code.allow, one per
line: `<check> <path> <function>  # issue <n>: note` (the issue number is required). They are
reported but do not fail; any other offence fails (exit status 1). Entries that no longer match
an offence are reported as stale (remove them). `--self-test` checks the checker on generated
fixtures (a 101-line function is flagged, a 100-line one is not, and so on).

Usage: check_code.py [--root DIR] [--allow FILE] [--self-test]
"""
import argparse
import os
import re
import sys
import tempfile

MAX_BODY = 100


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def library_dirs(root):
    """The library folders: the modules that cmake/modules.txt lists (one a line, lines starting
    with # are comments; the list CMakeLists.txt and tests/format_check.cmake read too), root's
    own list or, for a tree without one (the self-test's), this repository's; the public headers
    (include); and tools."""
    path = os.path.join(root, "cmake", "modules.txt")
    if not os.path.exists(path):
        path = os.path.join(REPO, "cmake", "modules.txt")
    with open(path) as f:
        mods = tuple(s for s in (line.strip() for line in f) if s and not s.startswith("#"))
    return mods + ("include", "tools")


OTHER_DIRS = ("tests", "bench", "examples", "fuzz")
OP_ENUMS = ("sx_cg_op", "sx_map_op", "sx_binary_op", "sx_fold_op")
CHECKS = ("long", "default", "todo")

IDENT_CALL = re.compile(r"([A-Za-z_]\w*)\s*\(")
TODO = re.compile(r"\bTODO\b")
TODO_ISSUE = re.compile(r"\bTODO\b\W*\(?\s*(#\d+|issue\s+#?\d+)", re.IGNORECASE)


def c_files(root, dirs):
    """Every .c and .h file under root/<dir> for dir in dirs, sorted, as paths relative to root."""
    out = []
    for d in dirs:
        top = os.path.join(root, d)
        for base, subdirs, files in os.walk(top):
            subdirs[:] = sorted(s for s in subdirs if not s.startswith("build"))
            for f in files:
                if f.endswith((".c", ".h")):
                    out.append(os.path.relpath(os.path.join(base, f), root))
    return sorted(out)


def strip_code(lines):
    """The lines with comments and string/char literals blanked (same line count and columns),
    so that braces, `default:` and `switch` are only seen in code."""
    out, in_comment = [], False
    for line in lines:
        res, i, n = [], 0, len(line)
        while i < n:
            if in_comment:
                j = line.find("*/", i)
                if j < 0:
                    res.append(" " * (n - i))
                    i = n
                else:
                    res.append(" " * (j + 2 - i))
                    i = j + 2
                    in_comment = False
            elif line.startswith("/*", i):
                in_comment = True
                res.append("  ")
                i += 2
            elif line.startswith("//", i):
                res.append(" " * (n - i))
                i = n
            elif line[i] in "\"'":
                q, j = line[i], i + 1
                while j < n and line[j] != q:
                    j += 2 if line[j] == "\\" else 1
                res.append(q + " " * (min(j, n) - i - 1) + (q if j < n else ""))
                i = j + 1
            else:
                res.append(line[i])
                i += 1
        out.append("".join(res))
    return out


def function_name(sig):
    """The name defined by a signature (its lines joined): the identifier before the parameter
    list, or a macro's first argument for `CAT(name, SFX)(...)`."""
    m = re.search(r"([A-Za-z_]\w*)\s*\(\s*([A-Za-z_]\w*)\s*,[^()]*\)\s*\(", sig)
    if m and m.group(1).isupper():
        return m.group(2)
    calls = IDENT_CALL.findall(sig)
    skip = {"__attribute__", "target", "SX_NODISCARD", "SX_PRINTF"}
    for name in calls:
        if name not in skip and not name.isupper():
            return name
    return calls[0] if calls else "?"


def functions(code):
    """(name, first body line, last body line, signature start) for every function definition
    of the stripped lines `code` (0-based line indices)."""
    out, i = [], 0
    while i < len(code):
        if code[i].rstrip() == "{" and i > 0:
            s = i - 1  # the signature: back to its first line, which starts at column 0
            while s > 0 and code[s][:1] in (" ", "\t") and code[s].strip():
                s -= 1
            sig = " ".join(code[k].strip() for k in range(s, i))
            j = i + 1
            while j < len(code) and code[j].rstrip() != "}":
                j += 1
            if "(" in sig and "=" not in sig.split("(")[0]:
                out.append((function_name(sig), i + 1, j - 1, s))
            i = j
        i += 1
    return out


def switch_over_op(expr, fn_text):
    """Whether a switch expression (its parenthesised text) is over one of the op enums."""
    if any(re.search(r"\(\s*(const\s+)?%s\s*\)" % t, expr) for t in OP_ENUMS):
        return True
    if re.search(r"(->|\.)\s*op\s*$", expr.strip()):
        return True
    m = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*", expr)
    if m:
        var = m.group(1)
        decl = r"\b(%s)\s+(const\s+)?\**\s*%s\b" % ("|".join(OP_ENUMS), re.escape(var))
        return re.search(decl, fn_text) is not None
    return False


def switch_defaults(code, start, end, sig_start):
    """(line, expr) of each `default:` that belongs directly to a switch over an op, within the
    function whose body is code[start..end] (signature from sig_start)."""
    fn_text = "\n".join(code[sig_start : end + 1])
    text = "\n".join(code[start : end + 1])
    hits = []
    for m in re.finditer(r"\bswitch\s*\(", text):
        depth, k = 1, m.end()
        while k < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[k], 0)
            k += 1
        expr = text[m.end() : k - 1]
        if not switch_over_op(expr, fn_text):
            continue
        b = text.find("{", k)
        if b < 0:
            continue
        depth, p = 1, b + 1
        while p < len(text) and depth:
            ch = text[p]
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif depth == 1 and text.startswith("default", p) and re.match(r"default\s*:", text[p:]):
                if not re.match(r"\w", text[p - 1]):  # nested switches sit at a deeper brace
                    hits.append((start + text.count("\n", 0, p), expr.strip()))
            elif depth == 1 and text.startswith("switch", p) and re.match(r"switch\s*\(", text[p:]):
                pass  # a nested switch without braces would share the depth: none in strix
            p += 1
    return hits


def check_file(root, rel, library):
    """The offences of one file: a list of (check, rel, line, function, message)."""
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        raw = f.read().split("\n")
    code = strip_code(raw)
    found = []
    fns = functions(code)
    if library:
        for name, first, last, sig in fns:
            body = last - first + 1
            if body > MAX_BODY:
                found.append(("long", rel, sig + 1, name, "%d body lines (max %d)" % (body, MAX_BODY)))
            for line, expr in switch_defaults(code, first, last, sig):
                found.append(("default", rel, line + 1, name, "default: in switch (%s)" % expr))
    for i, line in enumerate(raw):
        if TODO.search(line) and not TODO_ISSUE.search(line):
            owner = next((n for n, a, b, s in fns if s <= i <= b + 1), "-")
            found.append(("todo", rel, i + 1, owner, "TODO without an issue number"))
    return found


def read_allow(path):
    """The allowlist: {(check, path, function): note}; malformed lines are errors."""
    allow, errors = {}, []
    if not path or not os.path.exists(path):
        return allow, errors
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            body, _, note = text.partition("#")
            parts = body.split()
            if len(parts) != 3 or parts[0] not in CHECKS or not re.search(r"issue\s+\d+", note):
                errors.append("%s:%d: want `<check> <path> <function>  # issue <n>: note`" % (path, n))
                continue
            allow[tuple(parts)] = note.strip()
    return allow, errors


def run(root, allow_path, out=sys.stdout):
    """Check the tree at root; return the number of offences that are not allowed."""
    allow, errors = read_allow(allow_path)
    for e in errors:
        print(e, file=out)
    library = library_dirs(root)
    lib = set(c_files(root, library))
    found = []
    for rel in c_files(root, library + OTHER_DIRS):
        found += check_file(root, rel, rel in lib)
    bad, used = 0, set()
    for check, rel, line, fn, msg in found:
        key = (check, rel, fn)
        if key in allow:
            used.add(key)
            print("%s:%d: %s: [%s, allowed: %s] %s" % (rel, line, fn, check, allow[key], msg), file=out)
        else:
            bad += 1
            print("%s:%d: %s: [%s] %s" % (rel, line, fn, check, msg), file=out)
    for key in sorted(set(allow) - used):
        print("%s: stale allowlist entry (no such offence any more): %s" % (allow_path, " ".join(key)), file=out)
    print("check_code: %d offence(s), %d allowed, %d stale allowlist entr%s" %
          (bad, len(found) - bad, len(set(allow) - used), "y" if len(set(allow) - used) == 1 else "ies"), file=out)
    return bad + len(errors)


def self_test():
    """The checker on generated fixtures: each must be flagged (or not) as stated."""
    def body(n):
        return "".join("    x += %d;\n" % i for i in range(n))

    fixtures = {
        "tensor/long.c": "static int f101(int x)\n{\n%s    return x;\n}\n" % body(100),
        "tensor/ok.c": "static int f100(int x)\n{\n%s}\n\nint g(void)\n{\n    return 0;\n}\n" % body(100),
        "cgraph/sw.c": ("int h(const node *n, sx_map_op m, int k)\n{\n    switch (n->op) {\n"
                        "    case SX_OP_ADD:\n        return 1;\n    default:\n        return 0;\n    }\n"
                        "    switch (m) {\n    default:\n        break;\n    }\n"
                        "    switch ((sx_fold_op)k) {\n    default:\n        break;\n    }\n"
                        "    switch (k) {\n    default: /* not an op */\n        break;\n    }\n"
                        "    return 2;\n}\n"),
        "nn/todo.c": "/* TODO: later */\n/* TODO(#15): fine */\n/* TODO (issue 17) fine */\n",
        "tests/long_test.c": "static int t(int x)\n{\n%s    return x;\n}\n" % body(200),
        "engine/tmpl.h": ("static ATTR void CAT(kern, SFX)(int a,\n                              int b)\n"
                          "{\n%s}\n" % body(101)),
        "onnx/long.c": "static int o101(int x)\n{\n%s    return x;\n}\n" % body(100),
        "tools/long.c": "int t101(int x)\n{\n%s    return x;\n}\n" % body(100),
        "mpi/long.c": "int m101(int x)\n{\n%s    return x;\n}\n" % body(100),
    }
    want = {
        ("long", "tensor/long.c", "f101"),
        ("long", "engine/tmpl.h", "kern"),
        ("long", "onnx/long.c", "o101"),
        ("long", "tools/long.c", "t101"),
        ("long", "mpi/long.c", "m101"),
        ("default", "cgraph/sw.c", "h"),
        ("todo", "nn/todo.c", "-"),
    }
    with tempfile.TemporaryDirectory() as root:
        for rel, text in fixtures.items():
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w") as f:
                f.write(text)
        found = []
        library = library_dirs(root)
        lib = set(c_files(root, library))
        for rel in c_files(root, library + OTHER_DIRS):
            found += check_file(root, rel, rel in lib)
        got = {(c, r, fn) for c, r, _, fn, _ in found}
        ok = got == want and sum(1 for f in found if f[0] == "default") == 3
        ok = ok and sum(1 for f in found if f[0] == "todo") == 1
        long_line = [f for f in found if f[3] == "f101"]
        ok = ok and long_line and long_line[0][2] == 1 and "101 body lines" in long_line[0][4]
        # the allowlist: an allowed offence passes, the others still fail, a bad line fails
        allow = os.path.join(root, "allow")
        with open(allow, "w") as f:
            f.write("long tensor/long.c f101  # issue 15: test\nlong engine/tmpl.h kern  # issue 15: x\n"
                    "todo nn/todo.c -  # issue 15: x\nlong onnx/long.c o101  # issue 15: x\n"
                    "long tools/long.c t101  # issue 15: x\n"
                    "long mpi/long.c m101  # issue 15: x\n")
        sink = open(os.devnull, "w")
        ok = ok and run(root, allow, sink) == 3  # the three defaults
        with open(allow, "a") as f:
            f.write("long tensor/ok.c f100  # no issue number\n")
        ok = ok and run(root, allow, sink) == 4
        sink.close()
    for f in sorted(found):
        print("self-test flagged %s:%d: %s: [%s] %s" % (f[1], f[2], f[3], f[0], f[4]))
    print("check_code self-test: %s" % ("ok" if ok else "FAILED"))
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--root", default=os.path.dirname(here))
    ap.add_argument("--allow", default=os.path.join(here, "check_code.allow"))
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    return 1 if run(a.root, a.allow) else 0


if __name__ == "__main__":
    sys.exit(main())
