#!/usr/bin/env python3
"""gen_error_tests.py: Criterion tests of every public function that returns sx_status.

"Errors always say why": every function of the public headers that returns a status other than
SX_OK leaves a non-empty sx_last_error() that names the function. This script reads the public
headers given on the command line, finds every declaration `sx_status sx_name(params)`, and
writes checks (in tests of GROUP functions, included by tests/api/test_errors.c) that clear the
message, call the function with the worst arguments a caller can pass (every pointer NULL; signed
integers -1, unsigned ones 0, floating point NaN, enums an out-of-range value, structs by value
their _default() or zeroed) and check (API_EXPECT_ERROR, defined by the test file) that the
call fails with a message naming the function. A second call passes every scalar 0 instead
(0, 0.0, false, the enum's first value) to functions that take scalars.

A function for which those arguments are legitimately fine goes on ALLOW_OK (or, for the zero
scalars only, ALLOW_OK_ZERO) below with the reason; a function the test must not call on SKIP. The script fails when a listed name is no
longer declared (a stale entry) so that the lists stay short and true.

Usage: gen_error_tests.py --out FILE header.h...   (or --list header.h...: print the names)
"""
import argparse
import os
import re
import sys

# Functions whose all-NULL/invalid call may return SX_OK (the test still calls them: they must
# not crash, and a failure must still come with a message).
ALLOW_OK = {
    # none at present: every public function refuses NULL handles
}

# Functions whose call with every scalar 0 (and every pointer NULL) is legitimately SX_OK; the
# call with invalid scalars must still fail.
ALLOW_OK_ZERO = {
    "sx_shape_check": "rank 0 is a scalar's shape: no dims to read",
    "sx_slice_shape": "rank 0: nothing to slice, nothing to write",
    "sx_threads_set": "0 means one thread per core",
    "sx_threads_set_local": "0 returns the calling thread to the global count",
}

# Functions the generated test does not call at all.
SKIP = {
    # The message setter itself: sx_error(s, fmt, ...) returns s and needs a format string.
    "sx_error": "sets the message; returns its first argument",
    # Records s as the graph's error and returns s (SX_OK stays SX_OK): no failure of its own.
    "sx_cg_graph_fail": "returns its status argument",
}

SIGNED = {"int", "long", "short", "int8_t", "int16_t", "int32_t", "int64_t", "ptrdiff_t",
          "signed", "long long", "char"}
UNSIGNED = {"unsigned", "unsigned int", "unsigned long", "size_t", "uint8_t", "uint16_t",
            "uint32_t", "uint64_t", "uintptr_t"}
FLOATING = {"float", "double"}
DECL = re.compile(r"\bsx_status\s+(sx_\w+)\s*\(")


def strip_comments(text):
    """The header without comments, string literals and preprocessor lines."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r'"(\\.|[^"\\])*"', '""', text)
    lines = []
    cont = False
    for line in text.split("\n"):
        directive = cont or line.lstrip().startswith("#")
        cont = directive and line.rstrip().endswith("\\")
        lines.append("" if directive else line)
    return "\n".join(lines)


def typedefs(code):
    """The enum, struct and scalar typedef names of the headers: (enums, structs, scalars)."""
    enums, structs, scalars = set(), set(), {}
    for m in re.finditer(r"typedef\s+(enum|struct)\b[^;{]*\{", code):
        depth, i = 1, m.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(code[i], 0)
            i += 1
        name = re.match(r"\s*(\w+)\s*;", code[i:])
        if name:
            (enums if m.group(1) == "enum" else structs).add(name.group(1))
    for m in re.finditer(r"typedef\s+([\w ]+?)\s+(\w+)\s*;", code):
        if not m.group(1).startswith(("struct", "enum")):
            scalars[m.group(2)] = m.group(1)
    for m in re.finditer(r"typedef\s+[\w ]+?\**\s*\(\s*\*\s*(\w+)\s*\)", code):
        scalars[m.group(1)] = "*"  # a function pointer type
    return enums, structs, scalars


def declarations(code):
    """[(name, [param, ...], variadic)] of every `sx_status sx_name(...)` declaration."""
    out = []
    for m in DECL.finditer(code):
        depth, i = 1, m.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(code[i], 0)
            i += 1
        rest = code[i:]
        if not re.match(r"\s*(SX_NODISCARD|SX_PRINTF\s*\([^)]*\)|\s)*;", rest):
            continue  # a definition or a cast, not a prototype
        params, depth, cur = [], 0, ""
        for ch in code[m.end():i - 1]:
            if ch == "," and depth == 0:
                params.append(cur.strip())
                cur = ""
                continue
            depth += {"(": 1, ")": -1}.get(ch, 0)
            cur += ch
        if cur.strip():
            params.append(cur.strip())
        params = [" ".join(p.split()) for p in params if p.strip() != "void"]
        variadic = bool(params) and params[-1] == "..."
        out.append((m.group(1), [p for p in params if p != "..."], variadic))
    return out


def argument(param, enums, structs, scalars, defaults, zero):
    """The worst value of one parameter, as C source (zero: 0 for every scalar instead)."""
    if "*" in param or "[" in param:
        return "NULL"
    words = [w for w in re.findall(r"\w+", param) if w not in ("const", "volatile")]
    # the last word names the parameter unless the type stands alone (`int`, `sx_dtype`)
    ty = " ".join(words[:-1]) if len(words) > 1 else words[0]
    ty = scalars.get(ty, ty)
    if ty == "*":
        return "NULL"
    if ty == "bool":
        return "false"
    if ty in SIGNED:
        return "0" if zero else "-1"
    if ty in UNSIGNED:
        return "0"
    if ty in FLOATING:
        return "0.0" if zero else "NAN"
    if ty in enums:
        return "(%s)%d" % (ty, 0 if zero else -1)
    if ty in structs:
        return "%s_default()" % ty if ty + "_default" in defaults else "(%s){0}" % ty
    raise SystemExit("gen_error_tests.py: no argument for parameter '%s'" % param)


GROUP = 8


def generate(headers):
    code = "\n".join(strip_comments(open(h, encoding="utf-8").read()) for h in headers)
    enums, structs, scalars = typedefs(code)
    defaults = set(re.findall(r"\b(sx_\w+_default)\s*\(\s*void\s*\)", code))
    decls = declarations(code)
    names = [d[0] for d in decls]
    stale = [n for n in list(ALLOW_OK) + list(ALLOW_OK_ZERO) + list(SKIP) if n not in names]
    if stale:
        raise SystemExit("gen_error_tests.py: stale list entries (not declared): " +
                         ", ".join(stale))
    # The calls go into tests of GROUP functions each: Criterion runs every test in a process of
    # its own, and starting one costs more than the calls (70 ms under the sanitizers). A call
    # that crashes is found by Criterion's report: the last check it names is the call before.
    seen, calls = set(), []
    for name, params, _ in decls:
        if name in seen or name in SKIP:
            continue
        seen.add(name)
        body = []
        for zero in (False, True):
            ok = name in ALLOW_OK or (zero and name in ALLOW_OK_ZERO)
            may_ok = "true" if ok else "false"
            args = [argument(p, enums, structs, scalars, defaults, zero) for p in params]
            if zero and all(a == "NULL" for a in args):
                continue  # the same call as with the invalid arguments
            body += ["    sx_error_clear();",
                     "    s = %s(%s);" % (name, ", ".join(args)),
                     "    API_EXPECT_ERROR(\"%s\", s, %s);" % (name, may_ok)]
        calls.append((name, body))
    lines = []
    for i in range(0, len(calls), GROUP):
        group = calls[i:i + GROUP]
        lines += ["/* %s */" % ", ".join(n for n, _ in group),
                  "Test(api_errors, from_%s)" % group[0][0], "{", "    sx_status s;"]
        for _, body in group:
            lines += body
        lines += ["}", ""]
    head = ["/* Generated by scripts/gen_error_tests.py from %s: do not edit. */" %
            ", ".join(os.path.basename(h) for h in headers),
            "#define API_ERRORS_COUNT %d" % len(seen), ""]
    head += ["#include \"%s\"" % os.path.basename(h) for h in headers] + [""]
    return "\n".join(head + lines), sorted(seen)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("headers", nargs="+")
    a = ap.parse_args()
    text, names = generate(a.headers)
    if a.list:
        print("\n".join(names))
    if a.out:
        # rewrite only on change, so that an unchanged header set does not rebuild the test
        old = open(a.out, encoding="utf-8").read() if os.path.exists(a.out) else None
        if old != text:
            os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
            with open(a.out, "w", encoding="utf-8") as f:
                f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
