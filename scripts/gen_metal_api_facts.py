#!/usr/bin/env python3
"""gen_metal_api_facts.py - extracts facts about Apple's Objective-C Metal and
Foundation API from a copy of Apple's metal-cpp headers (Apache-2.0) into
metal/api/metal_api_facts.tsv, which the test suite's API check
(metal/check/api_check.c) compares metal/metal_backend.m and
metal/sim/objc/MetalDecls.h against.

Run by hand when moving to a newer metal-cpp; the output is committed:

    scripts/gen_metal_api_facts.py METAL_CPP_DIR "metal-cpp macOS 14.2 / iOS 17.2 (...)" \
        > metal/api/metal_api_facts.tsv

METAL_CPP_DIR holds Metal/*.hpp and Foundation/*.hpp. The output holds facts
only (names, selector strings, types, enum values), no code.

How metal-cpp spells the Objective-C API, and how it is read here:
  - every selector is `_MTL_PRIVATE_DEF_SEL(ident, "string")` (or _NS_);
  - every method is an inline definition `_MTL_INLINE RET MTL::Class::m(PARAMS)`
    whose body sends `_MTL_PRIVATE_SEL(ident)` to `this` (instance method) or
    to `_MTL_PRIVATE_CLS(Name)` (class method);
  - `class X : public NS::Referencing<X, Base>` gives the superclass
    (NSObject when absent); classes with `_MTL_PRIVATE_DEF_CLS(MTLX)` have a
    class object, the others are protocols (id<MTLX> in Objective-C);
  - enums are `_MTL_ENUM(type, Name) { Member = value, ... }` (and _OPTIONS),
    an Objective-C constant being the prefix plus the member (MTLGPUFamilyApple7);
  - C++ types map back to Objective-C ones: MTL::Buffer* -> MTLBuffer*,
    NS::UInteger -> NSUInteger, bool -> BOOL, const dropped from object pointers,
    NS::Object* (metal-cpp's id) -> id.
A zero-argument method with a result is listed as a property too (dot syntax
works for it); it is readwrite when the class also has set<Name>:.
"""
import os
import re
import sys

PREFIX = {"Metal": "MTL", "Foundation": "NS"}


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


class Facts:
    def __init__(self):
        self.sels = {}        # (ns, ident) -> selector string
        self.has_cls = set()  # Objective-C class names with a class object
        self.classes = {}     # objc name -> superclass objc name
        self.known = set()    # every objc type name (classes, enums, structs)
        self.methods = {}     # (class, kind, selector) -> (ret, [args])
        self.enums = {}       # objc enum type -> underlying
        self.consts = []      # (name, enum type, value)
        self.structs = {}     # objc name -> [(field, type)]
        self.functions = {}   # name -> (ret, [args])
        self.typedefs = {}    # objc name -> type (NSUInteger -> uintptr_t)


def objc_name(ns, name):
    return PREFIX_NS[ns] + name


PREFIX_NS = {"MTL": "MTL", "NS": "NS"}


def norm_type(t, ns, facts):
    """A C++ type of metal-cpp as the canonical Objective-C spelling."""
    t = t.replace("class ", "").replace("struct ", "").replace("std::", "")
    t = re.sub(r"\s+", " ", t).strip()
    t = re.sub(r"\b(MTL|NS)::", r"\1", t)
    t = re.sub(r"\bbool\b", "BOOL", t)
    # unqualified names inside the namespace (String*, UInteger)
    def qual(m):
        w = m.group(0)
        if w in ("UInteger", "Integer", "TimeInterval"):
            return "NS" + w
        if ns + w in facts.known:
            return ns + w
        return w
    t = re.sub(r"\b[A-Z]\w*\b", qual, t)
    t = re.sub(r"\s*\*", "*", t)
    # metal-cpp spells Objective-C's id (and generic ObjectType/KeyType) as Object*
    t = re.sub(r"\b(?:_Object|_KeyType|NSObject)\*", "id", t)
    t = re.sub(r"^const id\b", "id", t)
    # const on object pointers means nothing in Objective-C
    m = re.fullmatch(r"const ((?:MTL|NS)\w+\*+)", t)
    if m and m.group(1).rstrip("*") in facts.classes:
        t = m.group(1)
    return t


def parse_selectors(root, facts):
    for sub, ns in PREFIX.items():
        d = os.path.join(root, sub)
        for f in sorted(os.listdir(d)):
            text = strip_comments(open(os.path.join(d, f), encoding="utf-8").read())
            for m in re.finditer(r"_(MTL|NS)_PRIVATE_DEF_SEL\(\s*(\w+)\s*,\s*\"([^\"]*)\"\s*\)", text):
                facts.sels[(m.group(1), m.group(2))] = m.group(3)
            for m in re.finditer(r"_(MTL|NS)_PRIVATE_DEF_CLS\(\s*(\w+)\s*\)", text):
                facts.has_cls.add(m.group(2))


def parse_types(root, facts):
    for sub, ns in PREFIX.items():
        d = os.path.join(root, sub)
        for f in sorted(os.listdir(d)):
            text = strip_comments(open(os.path.join(d, f), encoding="utf-8").read())
            for m in re.finditer(r"\bclass\s+(?:_NS_EXPORT\s+)?(\w+)\s*:\s*public\s+(?:NS::)?(?:Referencing|Copying|SecureCoding)\s*<\s*(\w+)\s*(?:,\s*([\w:]+)\s*)?>", text):
                name, base = m.group(1), m.group(3)
                if name.startswith("_"):
                    continue
                sup = "NSObject"
                if base:
                    bns, _, bname = base.rpartition("::")
                    sup = (bns or ns) + bname
                    if bname == "Object" or bname.startswith("_"):
                        sup = "NSObject"
                facts.classes[ns + name] = sup
            for m in re.finditer(r"_(?:MTL|NS)_(ENUM|OPTIONS)\(\s*([\w:]+)\s*,\s*(\w+)\s*\)", text):
                facts.known.add(ns + m.group(3))
            for m in re.finditer(r"\bstruct\s+(\w+)\s*\{", text):
                facts.known.add(ns + m.group(1))
            for m in re.finditer(r"(?<!define)\busing\s+(\w+)\s*=\s*([\w:\s\*]+?)\s*;", text):
                if m.group(1) == "name":
                    continue  # the _NS_OPTIONS macro's own text
                facts.known.add(ns + m.group(1))
                facts.typedefs[ns + m.group(1)] = m.group(2)
    facts.classes["NSObject"] = "-"
    facts.known |= set(facts.classes)


def parse_enums(root, facts):
    for sub, ns in PREFIX.items():
        d = os.path.join(root, sub)
        for f in sorted(os.listdir(d)):
            text = strip_comments(open(os.path.join(d, f), encoding="utf-8").read())
            for m in re.finditer(r"_(?:MTL|NS)_(?:ENUM|OPTIONS)\(\s*([\w:]+)\s*,\s*(\w+)\s*\)\s*\{(.*?)\}", text, flags=re.S):
                under, name, body = m.group(1), ns + m.group(2), m.group(3)
                facts.enums[name] = norm_type(under, ns, facts)
                env = {}
                for item in body.split(","):
                    item = item.strip()
                    if not item:
                        continue
                    k, _, v = item.partition("=")
                    k = k.strip()
                    expr = v.strip()
                    if not expr:
                        value = env.get("__next__", 0)
                    else:
                        py = re.sub(r"\b(MTL|NS)::", "", expr)
                        py = re.sub(r"\b(0x[0-9A-Fa-f]+|\d+)(?:[uU][lL]{0,2}|[lL]{1,2}[uU]?)\b", r"\1", py)
                        py = re.sub(r"\bNSUIntegerMax\b|\bUIntegerMax\b", str(2**64 - 1), py)
                        try:
                            value = eval(py, {"__builtins__": {}}, env)  # arithmetic on earlier members only
                        except Exception:
                            value = None
                    if value is None:
                        continue
                    if value < 0 and facts.enums[name].startswith("NSU"):
                        value &= 2**64 - 1
                    env[k] = value
                    env["__next__"] = value + 1
                    facts.consts.append((ns + k, name, value))


def parse_structs(root, facts):
    for sub, ns in PREFIX.items():
        d = os.path.join(root, sub)
        for f in sorted(os.listdir(d)):
            text = strip_comments(open(os.path.join(d, f), encoding="utf-8").read())
            for m in re.finditer(r"\bstruct\s+(\w+)\s*\{(.*?)\n\}", text, flags=re.S):
                fields = []
                for line in m.group(2).split(";"):
                    line = line.strip()
                    if not line or "(" in line or line.startswith(("static", "using", "template")):
                        continue
                    fm = re.fullmatch(r"([\w:\s\*]+?)\s+(\w+)\s*(\[\s*\d+\s*\])?", line)
                    if fm:
                        arr = re.sub(r"\s", "", fm.group(3) or "")
                        fields.append((fm.group(2), norm_type(fm.group(1), ns, facts) + arr))
                if fields:
                    facts.structs[ns + m.group(1)] = fields


def split_params(params):
    out, depth, cur = [], 0, ""
    for ch in params:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    return [p.strip() for p in out if p.strip() and p.strip() != "void"]


def param_type(p):
    p = re.sub(r"\s*=.*$", "", p)
    m = re.fullmatch(r"(.*?[\s\*&])(\w+)", p)
    return m.group(1).strip() if m else p


def parse_methods(root, facts):
    defn = re.compile(r"_(MTL|NS)_INLINE\s+(?:constexpr\s+)?([^;{}()]*?)\s*\b(MTL|NS)::(\w+)::(\w+)\s*\(([^)]*)\)\s*(?:const\s*)?\{(.*?)\n\}", re.S)
    for sub, ns in PREFIX.items():
        d = os.path.join(root, sub)
        for f in sorted(os.listdir(d)):
            text = strip_comments(open(os.path.join(d, f), encoding="utf-8").read())
            for m in defn.finditer(text):
                ret, cns, cls, meth, params, body = m.group(2), m.group(3), m.group(4), m.group(5), m.group(6), m.group(7)
                objc_cls = cns + cls
                if objc_cls not in facts.classes and cls != "Object":
                    continue
                if cls == "Object":
                    objc_cls = "NSObject"
                s = re.search(r"_(MTL|NS)_PRIVATE_SEL\(\s*(\w+)\s*\)", body)
                if not s:
                    continue
                sel = facts.sels.get((s.group(1), s.group(2)))
                if sel is None:
                    continue
                recv = re.search(r"sendMessage(?:Safe)?\s*<[^>]*>\s*\(\s*([^,]+),", body)
                kind = "+" if recv and "_PRIVATE_CLS" in recv.group(1) else "-"
                args = [norm_type(param_type(p), cns, facts) for p in split_params(params)]
                if sel.count(":") != len(args):
                    continue  # a convenience overload, not the message itself
                facts.methods[(objc_cls, kind, sel)] = (norm_type(ret, cns, facts), args)
    # NSObject's alloc/init are templates in metal-cpp (NS::Object::alloc<_Class>)
    facts.methods[("NSObject", "+", "alloc")] = ("instancetype", [])
    facts.methods[("NSObject", "-", "init")] = ("instancetype", [])


def parse_functions(root, facts):
    for sub, ns in PREFIX.items():
        d = os.path.join(root, sub)
        for f in sorted(os.listdir(d)):
            text = strip_comments(open(os.path.join(d, f), encoding="utf-8").read())
            for m in re.finditer(r"extern\s+\"C\"\s+([\w:\s\*]+?)\s*\b((?:MTL|NS)\w+)\s*\(([^)]*)\)\s*;", text):
                args = [norm_type(param_type(p) if re.search(r"\w\s+\w+$", p) else p, ns, facts)
                        for p in split_params(m.group(3))]
                facts.functions[m.group(2)] = (norm_type(m.group(1), ns, facts), args)


def main():
    if len(sys.argv) != 3:
        sys.stderr.write("usage: gen_metal_api_facts.py METAL_CPP_DIR SOURCE_DESCRIPTION\n")
        return 2
    root, source = sys.argv[1], sys.argv[2]
    facts = Facts()
    parse_selectors(root, facts)
    parse_types(root, facts)
    parse_enums(root, facts)
    parse_structs(root, facts)
    parse_methods(root, facts)
    parse_functions(root, facts)
    w = sys.stdout.write
    w("# metal_api_facts.tsv - facts (names, selector strings, types, enum values) of Apple's\n")
    w("# Objective-C Metal and Foundation API, read from Apple's metal-cpp headers.\n")
    w("# source: %s\n" % source)
    w("# licence of the source: Apache-2.0, Copyright 2020-2023 Apple Inc. (metal-cpp LICENSE.txt)\n")
    w("# generated by scripts/gen_metal_api_facts.py; do not edit (metal/api/foundation_extra.tsv\n")
    w("# holds the few Foundation facts metal-cpp does not cover).\n")
    w("# records, tab-separated:\n")
    w("#   class     NAME SUPERCLASS class|protocol\n")
    w("#   method    CLASS +|- SELECTOR RETURN ARGTYPES (comma-separated, - for none)\n")
    w("#   property  CLASS +|- NAME TYPE readonly|readwrite GETTER\n")
    w("#   enum      NAME UNDERLYING\n")
    w("#   const     NAME ENUM VALUE\n")
    w("#   struct    NAME FIELD:TYPE,...\n")
    w("#   typedef   NAME TYPE\n")
    w("#   function  NAME RETURN ARGTYPES\n")
    for c in sorted(facts.classes):
        w("class\t%s\t%s\t%s\n" % (c, facts.classes[c], "class" if c in facts.has_cls or c == "NSObject" else "protocol"))
    for (c, k, s) in sorted(facts.methods):
        ret, args = facts.methods[(c, k, s)]
        w("method\t%s\t%s\t%s\t%s\t%s\n" % (c, k, s, ret, ",".join(args) or "-"))
    for (c, k, s) in sorted(facts.methods):
        ret, args = facts.methods[(c, k, s)]
        if args or ret == "void" or s in ("alloc", "init", "new") or s.startswith(("new", "copy", "mutableCopy")):
            continue
        names = [s]
        setter = "set" + s[0].upper() + s[1:] + ":"
        if s.startswith("is") and len(s) > 2 and s[2].isupper() and (c, k, "set" + s[2:] + ":") in facts.methods:
            names.append(s[2].lower() + s[3:])
            setter = "set" + s[2:] + ":"
        rw = "readwrite" if (c, k, setter) in facts.methods else "readonly"
        for n in names:
            w("property\t%s\t%s\t%s\t%s\t%s\t%s\n" % (c, k, n, ret, rw, s))
    for e in sorted(facts.enums):
        w("enum\t%s\t%s\n" % (e, facts.enums[e]))
    seen = set()
    for (n, e, v) in facts.consts:
        if n in seen:
            continue
        seen.add(n)
        w("const\t%s\t%s\t%d\n" % (n, e, v))
    for s in sorted(facts.structs):
        w("struct\t%s\t%s\n" % (s, ",".join("%s:%s" % f for f in facts.structs[s])))
    for t in sorted(facts.typedefs):
        w("typedef\t%s\t%s\n" % (t, norm_type(facts.typedefs[t], t[:3] if t.startswith("MTL") else "NS", facts)))
    for f in sorted(facts.functions):
        ret, args = facts.functions[f]
        w("function\t%s\t%s\t%s\n" % (f, ret, ",".join(args) or "-"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
