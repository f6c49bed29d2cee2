//! Which coordination node a lock name lives on: rendezvous hashing.
//!
//! A lock space spreads its lock names over many coordination nodes, and every client must
//! put a name on the same node without asking anyone. [`place`] does it by *rendezvous*
//! (highest-random-weight) hashing: each node gets a pseudo-random [`weight`] for the name,
//! a hash of the pair, and the name lives on the node with the greatest weight.
//!
//! # Why few names move when the nodes change
//!
//! For one name, the weights of the nodes behave like independent uniform draws, and each
//! node's weight depends only on the node and the name, never on which other nodes there are.
//!
//! - **Adding a node to N** moves a name only if the new node's weight beats the N weights
//!   that were there, which by symmetry happens for 1/(N+1) of the names; and a name that
//!   moves can move only onto the new node, since among the old nodes the order of the
//!   weights is what it was. So the new node takes its fair share, 1/(N+1), taken evenly
//!   from every old node, and no name moves between two old nodes.
//! - **Removing a node** moves only the names that lived on it: for every other name the
//!   greatest weight is still among the nodes that remain. Each orphaned name goes to its
//!   second-greatest node, which is as random as the first, so they spread evenly over the
//!   rest.
//!
//! A placement costs one hash per node (tens of nanoseconds each), which suits the tens or
//! hundreds of nodes a lock space has; nothing is kept between calls.
//!
//! # The contract
//!
//! Every client of a lock space, in any language or version, must place a name on the same
//! node, so the algorithm is fixed forever and identical on every platform. To reimplement
//! it (all arithmetic on unsigned 64-bit integers, modulo 2⁶⁴):
//!
//! 1. `h = 0xcbf29ce484222325` (the FNV-1a 64-bit offset basis).
//! 2. For each byte `b` of the UTF-8 encoding of the node's name, then for the one byte
//!    `0xFF`, then for each byte of the UTF-8 encoding of the lock name:
//!    `h = h XOR b; h = h * 0x100000001b3`. (FNV-1a 64 over `node ++ [0xFF] ++ name`. The
//!    byte `0xFF` never occurs in UTF-8, so no two pairs give the same bytes.)
//! 3. Finalize with MurmurHash3's `fmix64`: `h ^= h >> 33; h *= 0xff51afd7ed558ccd;
//!    h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53; h ^= h >> 33`. The result is
//!    [`weight`]`(node, name)`.
//! 4. [`place`]`(nodes, name)` is the node with the greatest weight for the name; of nodes
//!    with equal weights, the one whose name is smaller byte by byte (lexicographic order of
//!    the UTF-8 bytes, which is the order of the code points). No nodes: no node. The result
//!    does not depend on the order the nodes are given in, and a node given twice counts once.
//!
//! The unit tests check this against vectors printed by an independent implementation,
//! `tests/data/placement_golden.py` (plain Python 3) in the repository.
//!
//! # Example
//!
//! ```
//! use ydb_coordination::space::placement::{place, weight};
//!
//! let nodes = ["/local/locks-0", "/local/locks-1", "/local/locks-2"];
//! // The same answer on every client, whatever the order of the nodes.
//! assert_eq!(place(nodes, "charge-card-42"), Some("/local/locks-1"));
//! assert_eq!(place(nodes.into_iter().rev(), "charge-card-42"), Some("/local/locks-1"));
//!
//! // Because it has the greatest weight of the three.
//! let heaviest = nodes.into_iter().max_by_key(|node| weight(node, "charge-card-42"));
//! assert_eq!(heaviest, Some("/local/locks-1"));
//!
//! // A fourth node takes about a quarter of the names, and only onto itself.
//! let grown = ["/local/locks-0", "/local/locks-1", "/local/locks-2", "/local/locks-3"];
//! for i in 0..1000 {
//!     let name = format!("job-{i}");
//!     let after = place(grown, &name);
//!     assert!(after == place(nodes, &name) || after == Some("/local/locks-3"));
//! }
//! ```

use std::cmp::Reverse;

/// The FNV-1a 64-bit offset basis.
const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
/// The FNV-1a 64-bit prime.
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
/// Between the node and the name: a byte that never occurs in UTF-8.
const SEPARATOR: u8 = 0xff;

/// The weight of `node` for the lock name `name`: the greater, the more the node wants it.
///
/// FNV-1a 64 over the node's bytes, the byte `0xFF` and the name's bytes, finalized with
/// MurmurHash3's `fmix64` (see [the contract](self#the-contract)). Fixed forever: the same
/// value on every platform and in every version.
///
/// # Example
///
/// ```
/// use ydb_coordination::space::placement::weight;
///
/// assert_eq!(weight("/local/locks-0", "charge-card-42"), 0x4605_206a_b8af_a37c);
/// assert_eq!(weight("", ""), 0x1bbd_5c81_3c69_a8d7);
/// // The separator tells where the node ends.
/// assert_ne!(weight("ab", "c"), weight("a", "bc"));
/// ```
#[must_use]
pub fn weight(node: &str, name: &str) -> u64 {
    let hash = fnv1a(FNV_OFFSET_BASIS, node.as_bytes());
    let hash = fnv1a(hash, &[SEPARATOR]);
    fmix64(fnv1a(hash, name.as_bytes()))
}

/// The node of `nodes` that the lock name `name` lives on: the one with the greatest
/// [`weight`], of equal weights the smaller node name; `None` if `nodes` is empty.
///
/// The order of `nodes` does not matter, nor does a node given twice. Adding a node moves
/// only the names it takes, about 1/(N+1) of them; removing one moves only its own (see
/// [the module](self)).
///
/// # Example
///
/// ```
/// use ydb_coordination::space::placement::place;
///
/// let nodes: Vec<String> = (0..4).map(|i| format!("node-{i}")).collect();
/// assert_eq!(place(nodes.iter().map(String::as_str), "job-0"), Some("node-2"));
/// assert_eq!(place(["node-3", "node-2", "node-2"], "job-0"), Some("node-2"));
/// assert_eq!(place([], "job-0"), None);
/// ```
#[must_use]
pub fn place<'a>(nodes: impl IntoIterator<Item = &'a str>, name: &str) -> Option<&'a str> {
    heaviest(nodes, |node| weight(node, name))
}

/// The node with the greatest `weight`, of equal weights the smaller name.
fn heaviest<'a>(
    nodes: impl IntoIterator<Item = &'a str>,
    weight: impl Fn(&str) -> u64,
) -> Option<&'a str> {
    // Each key is computed once per node. Equal keys are equal names, so which of two equal
    // names comes back does not matter.
    nodes
        .into_iter()
        .max_by_key(|&node| (weight(node), Reverse(node)))
}

/// FNV-1a 64 of `bytes`, continuing from `hash`.
fn fnv1a(hash: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(hash, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(FNV_PRIME)
    })
}

/// MurmurHash3's 64-bit finalizer: every input bit flips about half of the output bits.
fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^= k >> 33;
    k
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    // Printed by tests/data/placement_golden.py.
    const LONG_NAME: &str = concat!(
        "orders/",
        "0123456789abcdef0123456789abcdef",
        "0123456789abcdef0123456789abcdef",
        "0123456789abcdef0123456789abcdef",
        "0123456789abcdef0123456789abcdef",
        "0123456789abcdef0123456789abcdef",
        "0123456789abcdef0123456789abcdef",
        "0123456789abcdef0123456789abcdef",
        "0123456789abcdef0123456789abcdef",
    );
    const LONG_NODE: &str = concat!(
        "/local/",
        "узел-узел-узел-узел-узел-",
        "узел-узел-узел-узел-узел-",
        "узел-узел-узел-узел-узел-",
        "узел-узел-узел-узел-узел-",
        "узел-узел-узел-узел-узел-",
        "узел-узел-узел-узел-узел-",
        "узел-узел-узел-узел-узел-",
        "узел-узел-узел-узел-узел-",
    );

    // (node, name, weight)
    const WEIGHTS: &[(&str, &str, u64)] = &[
        ("", "", 0x1bbd_5c81_3c69_a8d7),
        ("", "a", 0x8617_d2b3_528c_987e),
        ("a", "", 0x3aec_69d2_86fb_d39b),
        // The separator keeps these three apart: the same bytes, split differently.
        ("ab", "c", 0x7b42_09ec_cab7_f7c3),
        ("a", "bc", 0x300b_ffd2_a90e_cf20),
        ("abc", "", 0x3ee0_641e_1a67_4131),
        // U+00FF is the bytes C3 BF in UTF-8, not the separator byte FF; then a NUL byte.
        ("ÿ", "", 0xb3f2_7fa6_bc8d_9b44),
        ("", "ÿ", 0xb148_cdcf_a1cf_f7d3),
        ("a\u{0}b", "c", 0xd769_cafa_875a_8f69),
        // Neighbouring inputs, the names of the docs, non-ASCII UTF-8.
        ("node-0", "job-0", 0x68a2_3ab3_8c2f_690d),
        ("node-1", "job-0", 0x37ae_9d44_eb55_cb7a),
        ("node-0", "job-1", 0x6cde_84ad_5a3b_498d),
        ("/local/locks-0", "charge-card-42", 0x4605_206a_b8af_a37c),
        ("/local/locks-1", "charge-card-42", 0xdd42_5595_14fb_dcc5),
        ("/local/locks-2", "charge-card-42", 0x0274_063c_3c64_3d26),
        ("узел-1", "замок", 0x48af_2735_d764_04b3),
        ("ノード", "ロック🔒", 0xc921_c92f_968d_26ba),
        ("nœud", "verrou-é", 0xa8e9_3ebd_dd3a_9edd),
        // Long names and nodes.
        ("/local/locks-0", LONG_NAME, 0xf6f3_182e_b641_eb53),
        (LONG_NODE, "job-0", 0x3077_4856_4f23_5945),
        (LONG_NODE, LONG_NAME, 0x0dd1_5c2e_c782_4b9e),
    ];

    // (nodes, name, the node place picks)
    const PLACES: &[(&[&str], &str, &str)] = &[
        (
            &["/local/locks-0", "/local/locks-1", "/local/locks-2"],
            "charge-card-42",
            "/local/locks-1",
        ),
        (
            &["/local/locks-0", "/local/locks-1", "/local/locks-2"],
            "charge-card-43",
            "/local/locks-1",
        ),
        (&["node-0", "node-1", "node-2", "node-3"], "job-0", "node-2"),
        (&["node-0", "node-1", "node-2", "node-3"], "job-1", "node-1"),
        (&["node-0", "node-1", "node-2", "node-3"], "job-2", "node-3"),
        (
            &["node-0", "node-1", "node-2", "node-3", "node-4"],
            "job-0",
            "node-2",
        ),
        (
            &["node-0", "node-1", "node-2", "node-3", "node-4"],
            "job-1",
            "node-1",
        ),
        (
            &["node-0", "node-1", "node-2", "node-3", "node-4"],
            "job-2",
            "node-3",
        ),
        (&["a", "b", "c", "d", "e"], "", "b"),
        (&["узел-1", "ノード", "nœud"], "замок", "nœud"),
        (&["узел-1", "ノード", "nœud"], "ロック🔒", "ノード"),
        (
            &[
                "/local/locks-0",
                "/local/locks-1",
                "/local/locks-2",
                LONG_NODE,
            ],
            LONG_NAME,
            "/local/locks-0",
        ),
    ];

    #[test]
    fn weights_match_the_independent_implementation() {
        assert_eq!(LONG_NAME.len(), 263);
        assert_eq!(LONG_NODE.len(), 367);
        for &(node, name, expected) in WEIGHTS {
            assert_eq!(weight(node, name), expected, "weight({node:?}, {name:?})");
        }
    }

    #[test]
    fn places_match_the_independent_implementation() {
        for &(nodes, name, expected) in PLACES {
            assert_eq!(
                place(nodes.iter().copied(), name),
                Some(expected),
                "{nodes:?} {name:?}"
            );
        }
    }

    #[test]
    fn fnv1a_and_fmix64_are_the_published_functions() {
        // FNV-1a 64's published test vectors; fmix64 maps 0 to 0.
        assert_eq!(fnv1a(FNV_OFFSET_BASIS, b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(FNV_OFFSET_BASIS, b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(FNV_OFFSET_BASIS, b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(fmix64(0), 0);
        assert_eq!(weight("a", "b"), fmix64(fnv1a(FNV_OFFSET_BASIS, b"a\xffb")));
    }

    #[test]
    fn no_nodes_no_node() {
        assert_eq!(place([], "job-0"), None);
        assert_eq!(place(Vec::new(), ""), None);
    }

    #[test]
    fn equal_weights_go_to_the_smaller_name() {
        let same = |_: &str| 7;
        assert_eq!(heaviest(["b", "a", "c"], same), Some("a"));
        assert_eq!(heaviest(["c", "b", "a"], same), Some("a"));
        assert_eq!(heaviest(["ab", "a", "b"], same), Some("a"));
        // By bytes: every non-ASCII character sorts after ASCII.
        assert_eq!(heaviest(["é", "z"], same), Some("z"));
        // The weight still comes first.
        assert_eq!(
            heaviest(["b", "a"], |node: &str| u64::from(node == "b")),
            Some("b")
        );
    }

    fn node_name() -> impl Strategy<Value = String> {
        // A small alphabet makes duplicates and shared prefixes common.
        prop_oneof!["[a-c]{0,2}", "\\PC{0,12}"]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn the_order_of_the_nodes_does_not_matter(
            (nodes, shuffled) in prop::collection::vec(node_name(), 1..8)
                .prop_flat_map(|nodes| (Just(nodes.clone()), Just(nodes).prop_shuffle())),
            name in "\\PC{0,16}",
        ) {
            let placed = place(nodes.iter().map(String::as_str), &name);
            prop_assert!(placed.is_some());
            prop_assert_eq!(place(shuffled.iter().map(String::as_str), &name), placed);
            prop_assert_eq!(place(nodes.iter().rev().map(String::as_str), &name), placed);
            // A node given again changes nothing.
            let doubled = nodes.iter().chain(&shuffled).map(String::as_str);
            prop_assert_eq!(place(doubled, &name), placed);
            // It is the greatest weight, then the smallest name, among the nodes given.
            let best = nodes.iter().map(|node| (weight(node, &name), Reverse(node.as_str()))).max();
            prop_assert_eq!(placed, best.map(|(_, Reverse(node))| node));
        }
    }

    fn nodes(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("node-{i}")).collect()
    }

    fn names(count: usize) -> Vec<String> {
        (0..count).map(|i| format!("job-{i}")).collect()
    }

    fn placements<'a>(nodes: &'a [String], names: &[String]) -> Vec<&'a str> {
        names
            .iter()
            .map(|name| place(nodes.iter().map(String::as_str), name).unwrap())
            .collect()
    }

    /// The fraction of `names` that `place` moves when node `N` joins nodes `0..N`, for N in
    /// 1..=8; checks that every moved name moves onto the new node.
    fn moved_fractions(names: &[String]) -> Vec<f64> {
        (1..=8)
            .map(|n| {
                let grown = nodes(n + 1);
                let before = placements(&grown[..n], names);
                let after = placements(&grown, names);
                let mut moved = 0;
                for ((name, &old), &new) in names.iter().zip(&before).zip(&after) {
                    if old != new {
                        assert_eq!(
                            new, grown[n],
                            "{name}: {old} -> {new} when {} joined",
                            grown[n]
                        );
                        moved += 1;
                    }
                }
                f64::from(moved) / names.len() as f64
            })
            .collect()
    }

    #[test]
    fn adding_a_node_moves_about_1_in_n_plus_1_names_only_onto_it() {
        let names = names(20_000);
        let fractions = moved_fractions(&names);
        for (n, &fraction) in (1..=8).zip(&fractions) {
            let fair = 1.0 / f64::from(n + 1);
            // The standard deviation is at most 0.0036 for 20,000 names: 0.02 is over 5 of them.
            assert!(
                (fraction - fair).abs() < 0.02,
                "N = {n}: moved {fraction}, fair {fair}"
            );
        }
    }

    #[test]
    fn removing_a_node_moves_only_its_names() {
        let names = names(20_000);
        for n in 2..=9 {
            let nodes = nodes(n);
            let before = placements(&nodes, &names);
            for gone in 0..n {
                let mut rest = nodes.clone();
                rest.remove(gone);
                let after = placements(&rest, &names);
                for ((name, &old), &new) in names.iter().zip(&before).zip(&after) {
                    if old == nodes[gone] {
                        assert_ne!(new, old, "{name}");
                    } else {
                        assert_eq!(new, old, "{name}: moved when {} left", nodes[gone]);
                    }
                }
            }
        }
    }

    #[test]
    fn eight_nodes_get_their_fair_share_within_ten_percent() {
        let nodes = nodes(8);
        let names = names(40_000);
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for node in placements(&nodes, &names) {
            *counts.entry(node).or_default() += 1;
        }
        // Fair is 5,000 each, with a standard deviation of 66: ±500 is over 7 of them.
        for node in &nodes {
            let count = counts.get(node.as_str()).copied().unwrap_or(0);
            assert!(
                (4_500..=5_500).contains(&count),
                "{node}: {count} of 40,000 names"
            );
        }
    }
}
