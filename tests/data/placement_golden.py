#!/usr/bin/env python3
"""Golden vectors for `ydb_coordination::space::placement`, from an independent implementation.

The placement function is a wire contract: every client, in every language and version, must
put a lock name on the same coordination node. This script implements the contract again,
from its description in `src/space/placement.rs` and nothing else, and prints the vectors that
the unit tests there compare against, as Rust tuples:

    python3 tests/data/placement_golden.py

The contract:
- weight(node, name) = fmix64(FNV-1a-64(utf8(node) ++ [0xFF] ++ utf8(name)))
  (FNV-1a: offset basis 0xcbf29ce484222325, prime 0x100000001b3, per byte `h ^= b; h *= p`;
  fmix64 is MurmurHash3's finalizer; all arithmetic modulo 2**64);
- place(nodes, name) = the node with the greatest weight; on equal weights the node whose
  UTF-8 bytes are lexicographically smaller; nothing for no nodes.

Plain Python 3, no dependencies.
"""

MASK = (1 << 64) - 1
FNV_OFFSET_BASIS = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
SEPARATOR = 0xFF


def fnv1a64(data):
    h = FNV_OFFSET_BASIS
    for b in data:
        h ^= b
        h = (h * FNV_PRIME) & MASK
    return h


def fmix64(k):
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & MASK
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & MASK
    k ^= k >> 33
    return k


def weight(node, name):
    return fmix64(fnv1a64(node.encode("utf-8") + bytes([SEPARATOR]) + name.encode("utf-8")))


def place(nodes, name):
    if not nodes:
        return None
    # Greatest weight first, then the smaller name (by its UTF-8 bytes).
    return min(nodes, key=lambda node: (-weight(node, name), node.encode("utf-8")))


# The long strings, in the pieces the Rust side writes them in (a `concat!` of literals).
LONG_NAME_PIECES = ["orders/"] + ["0123456789abcdef" * 2] * 8  # 263 bytes
LONG_NODE_PIECES = ["/local/"] + ["узел-" * 5] * 8  # 367 bytes, two-byte characters
LONG_NAME = "".join(LONG_NAME_PIECES)
LONG_NODE = "".join(LONG_NODE_PIECES)
CONSTS = [("LONG_NAME", LONG_NAME_PIECES), ("LONG_NODE", LONG_NODE_PIECES)]


def literal(s):
    """A Rust string literal for s."""
    out = []
    for ch in s:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append("\\u{%x}" % ord(ch))
    return '"' + "".join(out) + '"'


def rust_str(s):
    """A Rust expression for s: the name of a long constant, or a literal."""
    for const, pieces in CONSTS:
        if s == "".join(pieces):
            return const
    return literal(s)


def hex64(value):
    digits = "%016x" % value
    return "0x" + "_".join(digits[i : i + 4] for i in range(0, 16, 4))


WEIGHTS = [
    ("", ""),
    ("", "a"),
    ("a", ""),
    "The separator keeps these three apart: the same bytes, split differently.",
    ("ab", "c"),
    ("a", "bc"),
    ("abc", ""),
    "U+00FF is the bytes C3 BF in UTF-8, not the separator byte FF; then a NUL byte.",
    ("\u00ff", ""),
    ("", "\u00ff"),
    ("a\u0000b", "c"),
    "Neighbouring inputs, the names of the docs, non-ASCII UTF-8.",
    ("node-0", "job-0"),
    ("node-1", "job-0"),
    ("node-0", "job-1"),
    ("/local/locks-0", "charge-card-42"),
    ("/local/locks-1", "charge-card-42"),
    ("/local/locks-2", "charge-card-42"),
    ("узел-1", "замок"),
    ("ノード", "ロック🔒"),
    ("nœud", "verrou-é"),
    "Long names and nodes.",
    ("/local/locks-0", LONG_NAME),
    (LONG_NODE, "job-0"),
    (LONG_NODE, LONG_NAME),
]

PLACES = [
    (["/local/locks-0", "/local/locks-1", "/local/locks-2"], "charge-card-42"),
    (["/local/locks-0", "/local/locks-1", "/local/locks-2"], "charge-card-43"),
    (["node-0", "node-1", "node-2", "node-3"], "job-0"),
    (["node-0", "node-1", "node-2", "node-3"], "job-1"),
    (["node-0", "node-1", "node-2", "node-3"], "job-2"),
    (["node-0", "node-1", "node-2", "node-3", "node-4"], "job-0"),
    (["node-0", "node-1", "node-2", "node-3", "node-4"], "job-1"),
    (["node-0", "node-1", "node-2", "node-3", "node-4"], "job-2"),
    (["a", "b", "c", "d", "e"], ""),
    (["узел-1", "ノード", "nœud"], "замок"),
    (["узел-1", "ノード", "nœud"], "ロック🔒"),
    (["/local/locks-0", "/local/locks-1", "/local/locks-2", LONG_NODE], LONG_NAME),
]


def main():
    print("// Printed by tests/data/placement_golden.py.")
    for const, pieces in CONSTS:
        print("const %s: &str = concat!(" % const)
        for piece in pieces:
            print("    %s," % literal(piece))
        print(");")
    print()
    print("// (node, name, weight)")
    print("const WEIGHTS: &[(&str, &str, u64)] = &[")
    for entry in WEIGHTS:
        if isinstance(entry, str):
            print("    // " + entry)
            continue
        node, name = entry
        print("    (%s, %s, %s)," % (rust_str(node), rust_str(name), hex64(weight(node, name))))
    print("];")
    print()
    print("// (nodes, name, the node place picks)")
    print("const PLACES: &[(&[&str], &str, &str)] = &[")
    for nodes, name in PLACES:
        listed = ", ".join(rust_str(node) for node in nodes)
        print("    (&[%s], %s, %s)," % (listed, rust_str(name), rust_str(place(nodes, name))))
    print("];")


if __name__ == "__main__":
    main()
