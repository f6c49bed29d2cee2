//! Layouts of a [`LockSpace`](super::LockSpace): which coordination nodes hold the names,
//! how a name's place is found in a layout and in the transition between two, and the
//! fencing token a lock in a space carries (the rules are in [`Layout`]'s docs). Pure: no
//! I/O, no clock.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::placement::place;
use crate::error::{Error, ErrorKind, Result};
use crate::session::FencingToken;

use crate::config::{MAX_NODE_NAME_LEN, MAX_NODES};

/// The format tag of an encoded layout ([`Layout::to_bytes`]).
const FORMAT: &str = "ydb-coordination/lock-space-layout/1";

/// A layout: the coordination nodes (by the names the space knows them by) that hold a
/// lock space's names, in one epoch; while resharding, also the nodes it moves to.
///
/// # Epochs
///
/// Every layout the fleet is told to run has an epoch, one greater than the last: a
/// *stable* layout `A` (epoch `e`), the *transition* `A+B` (epoch `e + 1`), the stable `B`
/// (epoch `e + 2`), and so on. A process may run the layout of epoch `E + 1` only when
/// every process runs at least `E` (the [`SpaceDirectory`](super::SpaceDirectory)'s steps
/// check it): so processes running `A`
/// and processes running `B` never coexist, only `A` with `A+B` and `A+B` with `B`.
///
/// # Where a name lives
///
/// In a stable layout a name lives on one node, [`placement::place`](super::placement::place)
/// over the layout's nodes. In a transition it lives in both places, the old first, then
/// the new ([`Layout::parts`]); a lock is taken in both, in that order (so two processes
/// cannot deadlock), and a counted semaphore takes its permits in both. Processes running
/// `A` and `A+B` meet on the `A` place, those running `A+B` and `B` on the `B` place, so
/// exclusion and limits hold at every moment.
///
/// # Fencing tokens
///
/// A lock in a space carries a [`FencingToken`], `(epoch, order id)` compared in that order.
/// The order id is the node's fencing token in the place the epoch names. In a stable
/// layout the epoch is the layout's own. In a transition it is the old layout's while the
/// next stable layout has not been published (the transition's holders then alternate with
/// the old layout's on the old place, whose order ids grow), and the new layout's once it
/// has (they then alternate with the new layout's on the new place): a holder in a
/// transition reads the published layout after it has both places, which tells the two
/// apart. So every holder of a name has a greater token than every
/// holder before it, across any number of moves.
///
/// # Examples
///
/// ```
/// use ydb_coordination::space::Layout;
///
/// let a = Layout::new(1, ["n1", "n2"])?;
/// assert_eq!(a.parts("job-7").len(), 1);
/// let moving = a.add_node("n3")?; // the transition A+B, epoch 2
/// assert!(moving.is_transition());
/// assert_eq!(moving.epoch(), 2);
/// let b = moving.finish()?; // B, epoch 3
/// assert_eq!(b.nodes(), ["n1", "n2", "n3"]);
/// // Bytes for a `Published` value, and back.
/// assert_eq!(Layout::from_bytes(&b.to_bytes())?, b);
/// # Ok::<(), ydb_coordination::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Layout {
    epoch: u64,
    nodes: Vec<String>,
    next: Option<Vec<String>>,
}

/// What a layout is on the wire (a published value).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    format: String,
    epoch: u64,
    nodes: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    next: Option<Vec<String>>,
}

/// One place of a name in a layout: a node, and the epochs whose holders meet there.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Part {
    /// The node's name in the layout.
    pub node: String,
    /// The name's place in the old layout (in a stable layout: its only place).
    pub old: bool,
    /// The name's place in the new layout (in a stable layout: its only place).
    pub new: bool,
}

/// A member of the fleet that runs an older epoch than a step needs
/// ([`Layout::lagging`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Lagging {
    /// The member's session on the directory node.
    pub session_id: u64,
    /// The epoch it runs.
    pub epoch: u64,
}

/// How a published layout stands to the one a process runs ([`Layout::judge`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Judgment {
    /// The same layout.
    Same,
    /// Its next step: followed at once.
    Next,
    /// A newer epoch that is not the next step (a gap, or another transition): the
    /// process's locks were taken in a layout the fleet has left, so they are lost, and
    /// it adopts the newer one once it holds nothing, as a process opened now would.
    Restart,
    /// The same epoch with other nodes, or an older epoch: the directory contradicts what
    /// the process runs. Its locks are lost and it takes none until the directory
    /// publishes its layout again or a newer one.
    Contradicts,
}

impl Layout {
    /// A stable layout of `nodes` (sorted, each once) in `epoch`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] for epoch 0, no nodes, more than [`MAX_NODES`], or a
    /// node name that is empty or over [`MAX_NODE_NAME_LEN`] bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// # use ydb_coordination::space::Layout;
    /// let layout = Layout::new(1, ["b", "a", "b"])?;
    /// assert_eq!(layout.nodes(), ["a", "b"]);
    /// # Ok::<(), ydb_coordination::Error>(())
    /// ```
    pub fn new<S: AsRef<str>>(epoch: u64, nodes: impl IntoIterator<Item = S>) -> Result<Self> {
        if epoch == 0 {
            return Err(invalid("a layout's epoch starts at 1"));
        }
        Ok(Self {
            epoch,
            nodes: node_set(nodes)?,
            next: None,
        })
    }

    /// The layout's epoch.
    ///
    /// ```
    /// # use ydb_coordination::space::Layout;
    /// assert_eq!(Layout::new(4, ["a"])?.epoch(), 4);
    /// # Ok::<(), ydb_coordination::Error>(())
    /// ```
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The nodes (in a transition: the old layout's), sorted.
    ///
    /// ```
    /// # use ydb_coordination::space::Layout;
    /// assert_eq!(Layout::new(1, ["a"])?.add_node("b")?.nodes(), ["a"]);
    /// # Ok::<(), ydb_coordination::Error>(())
    /// ```
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// In a transition, the new layout's nodes, sorted.
    ///
    /// ```
    /// # use ydb_coordination::space::Layout;
    /// let moving = Layout::new(1, ["a"])?.add_node("b")?;
    /// assert_eq!(moving.next(), Some(&["a".to_string(), "b".to_string()][..]));
    /// # Ok::<(), ydb_coordination::Error>(())
    /// ```
    pub fn next(&self) -> Option<&[String]> {
        self.next.as_deref()
    }

    /// Whether this is a transition `A+B`.
    ///
    /// ```
    /// # use ydb_coordination::space::Layout;
    /// assert!(!Layout::new(1, ["a"])?.is_transition());
    /// # Ok::<(), ydb_coordination::Error>(())
    /// ```
    pub fn is_transition(&self) -> bool {
        self.next.is_some()
    }

    /// Every node the layout names (in a transition, both sides'), sorted, each once.
    ///
    /// ```
    /// # use ydb_coordination::space::Layout;
    /// let moving = Layout::new(1, ["a", "b"])?.remove_node("a")?.finish()?.add_node("c")?;
    /// assert_eq!(moving.all_nodes(), ["b", "c"]);
    /// # Ok::<(), ydb_coordination::Error>(())
    /// ```
    pub fn all_nodes(&self) -> Vec<&str> {
        let mut all: Vec<&str> = self
            .nodes
            .iter()
            .chain(self.next.iter().flatten())
            .map(String::as_str)
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    /// The places of `name`, in the order a lock takes them: in a stable layout one; in a
    /// transition the old place, then the new one (one part if the name does not move).
    ///
    /// ```
    /// # use ydb_coordination::space::Layout;
    /// let a = Layout::new(1, ["n1"])?;
    /// let moving = a.begin(["n2"])?;
    /// let parts = moving.parts("job");
    /// assert_eq!((parts[0].node.as_str(), parts[1].node.as_str()), ("n1", "n2"));
    /// assert!(parts[0].old && parts[1].new);
    /// # Ok::<(), ydb_coordination::Error>(())
    /// ```
    pub fn parts(&self, name: &str) -> Vec<Part> {
        let old = self.place_in(&self.nodes, name);
        let Some(next) = &self.next else {
            return vec![Part {
                node: old,
                old: true,
                new: true,
            }];
        };
        let new = self.place_in(next, name);
        if new == old {
            return vec![Part {
                node: old,
                old: true,
                new: true,
            }];
        }
        vec![
            Part {
                node: old,
                old: true,
                new: false,
            },
            Part {
                node: new,
                old: false,
                new: true,
            },
        ]
    }

    /// The node of `name` among `nodes` (never empty: a layout always has a node).
    fn place_in(&self, nodes: &[String], name: &str) -> String {
        place(nodes.iter().map(String::as_str), name)
            .unwrap_or_default()
            .to_string()
    }

    /// The fencing token of a lock taken in this layout, from the order ids it got in each
    /// of [`Layout::parts`] (`orders[i]` for part `i`) and, in a transition, the epoch of
    /// the layout published after both parts were held (`published`; `None`: no directory,
    /// the old layout's rule): the rule of the type's docs.
    pub(crate) fn token(&self, orders: &[u64], published: Option<u64>) -> FencingToken {
        let (new, epoch) = self.token_place(published);
        let index = if new {
            orders.len().saturating_sub(1)
        } else {
            0
        };
        FencingToken::new(epoch, orders.get(index).copied().unwrap_or_default())
    }

    /// Which place's order id a token carries (`true`: the last of [`Layout::parts`], the
    /// new one; `false`: the first) and the token's epoch, given the epoch published after
    /// the places were held: where every holder of a name meets now.
    pub(crate) fn token_place(&self, published: Option<u64>) -> (bool, u64) {
        if self.next.is_none() {
            (false, self.epoch)
        } else if published.is_some_and(|p| p > self.epoch) {
            // A newer epoch than this one was published: this one is below `u64::MAX`.
            (true, self.epoch.saturating_add(1))
        } else {
            // A transition's epoch is at least 2 (`Layout::from_bytes`, `Layout::begin`).
            (false, self.epoch.saturating_sub(1))
        }
    }

    /// The transition from this stable layout to one of `nodes`, one epoch on.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::PreconditionFailed`] when this is a transition already (finish it
    /// first) or `nodes` are the layout's own; [`ErrorKind::InvalidArgument`] for a node set
    /// [`Layout::new`] refuses.
    ///
    /// # Examples
    ///
    /// ```
    /// # use ydb_coordination::space::Layout;
    /// let moving = Layout::new(1, ["a"])?.begin(["a", "b"])?;
    /// assert_eq!((moving.epoch(), moving.is_transition()), (2, true));
    /// # Ok::<(), ydb_coordination::Error>(())
    /// ```
    pub fn begin<S: AsRef<str>>(&self, nodes: impl IntoIterator<Item = S>) -> Result<Self> {
        if self.is_transition() {
            return Err(Error::new(
                ErrorKind::PreconditionFailed,
                format!(
                    "the layout of epoch {} is a transition already; finish it before starting another",
                    self.epoch
                ),
            ));
        }
        let next = node_set(nodes)?;
        if next == self.nodes {
            return Err(Error::new(
                ErrorKind::PreconditionFailed,
                "the new layout has the same nodes as the current one; nothing would move",
            ));
        }
        Ok(Self {
            epoch: self.next_epoch()?,
            nodes: self.nodes.clone(),
            next: Some(next),
        })
    }

    /// The transition to this layout's nodes and `node` (see [`Layout::begin`]).
    ///
    /// # Errors
    ///
    /// As [`Layout::begin`]; adding a node the layout has is `PreconditionFailed`.
    ///
    /// ```
    /// # use ydb_coordination::space::Layout;
    /// assert!(Layout::new(1, ["a"])?.add_node("a").is_err());
    /// # Ok::<(), ydb_coordination::Error>(())
    /// ```
    pub fn add_node(&self, node: &str) -> Result<Self> {
        self.begin(self.nodes.iter().map(String::as_str).chain([node]))
    }

    /// The transition to this layout's nodes without `node` (see [`Layout::begin`]).
    ///
    /// # Errors
    ///
    /// As [`Layout::begin`]; removing a node the layout lacks is `PreconditionFailed`,
    /// removing the last one `InvalidArgument`.
    ///
    /// ```
    /// # use ydb_coordination::space::Layout;
    /// let moving = Layout::new(1, ["a", "b"])?.remove_node("b")?;
    /// assert_eq!(moving.next(), Some(&["a".to_string()][..]));
    /// # Ok::<(), ydb_coordination::Error>(())
    /// ```
    pub fn remove_node(&self, node: &str) -> Result<Self> {
        self.begin(self.nodes.iter().filter(|n| *n != node))
    }

    /// The stable layout this transition moves to, one epoch on.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::PreconditionFailed`] when this is not a transition.
    ///
    /// ```
    /// # use ydb_coordination::space::Layout;
    /// let b = Layout::new(1, ["a"])?.add_node("b")?.finish()?;
    /// assert_eq!((b.epoch(), b.nodes().len(), b.is_transition()), (3, 2, false));
    /// # Ok::<(), ydb_coordination::Error>(())
    /// ```
    pub fn finish(&self) -> Result<Self> {
        let Some(next) = &self.next else {
            return Err(Error::new(
                ErrorKind::PreconditionFailed,
                format!(
                    "the layout of epoch {} is not a transition; there is nothing to finish",
                    self.epoch
                ),
            ));
        };
        Ok(Self {
            epoch: self.next_epoch()?,
            nodes: next.clone(),
            next: None,
        })
    }

    /// The epoch of the next step: one on, unless this is the last epoch there is.
    fn next_epoch(&self) -> Result<u64> {
        self.epoch.checked_add(1).ok_or_else(|| {
            Error::new(
                ErrorKind::PreconditionFailed,
                format!(
                    "the layout's epoch {} is the last one; no step can follow it",
                    self.epoch
                ),
            )
        })
    }

    /// The members, given as (session id, epoch run), that run an epoch older than this
    /// layout's, oldest first: the ones a step after this layout waits for (what
    /// [`SpaceDirectory::lagging`](super::SpaceDirectory::lagging) reads; `ydb-coord space
    /// show` marks them).
    ///
    /// # Examples
    ///
    /// ```
    /// # use ydb_coordination::space::Layout;
    /// let layout = Layout::new(1, ["a"])?.add_node("b")?; // epoch 2
    /// let lag = layout.lagging([(1, 2), (5, 1), (7, 1)]);
    /// assert_eq!(lag.iter().map(|l| l.session_id).collect::<Vec<_>>(), [5, 7]);
    /// # Ok::<(), ydb_coordination::Error>(())
    /// ```
    pub fn lagging(&self, members: impl IntoIterator<Item = (u64, u64)>) -> Vec<Lagging> {
        let mut lag: Vec<Lagging> = members
            .into_iter()
            .filter(|&(_, e)| e < self.epoch)
            .map(|(session_id, epoch)| Lagging { session_id, epoch })
            .collect();
        lag.sort_by_key(|l| (l.epoch, l.session_id));
        lag
    }

    /// Whether `next` may follow this layout now, with the fleet's members running the
    /// epochs `members` (session id, epoch): it must be this layout's next step (one epoch
    /// on, from [`Layout::begin`] or [`Layout::finish`]), and no member may run an epoch
    /// older than this layout's.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::PreconditionFailed`] naming the first lagging member, or when `next` is
    /// not this layout's next step.
    pub(crate) fn check_advance(
        &self,
        next: &Layout,
        members: impl IntoIterator<Item = (u64, u64)>,
    ) -> Result<()> {
        if !self.is_followed_by(next) {
            return Err(Error::new(
                ErrorKind::PreconditionFailed,
                format!(
                    "the layout of epoch {} is not the next step after epoch {}; start from the published layout",
                    next.epoch, self.epoch
                ),
            ));
        }
        if let Some(lag) = self.lagging(members).first() {
            return Err(Error::new(
                ErrorKind::PreconditionFailed,
                format!(
                    "member session {} still runs epoch {}, older than the published {}; wait until every member runs it",
                    lag.session_id, lag.epoch, self.epoch
                ),
            ));
        }
        Ok(())
    }

    /// Whether `next` is this layout's next step: one epoch on, from [`Layout::begin`] or
    /// [`Layout::finish`].
    fn is_followed_by(&self, next: &Layout) -> bool {
        self.epoch.checked_add(1) == Some(next.epoch)
            && match (&self.next, &next.next) {
                (None, Some(_)) => next.nodes == self.nodes,
                (Some(to), None) => next.nodes == *to,
                _ => false,
            }
    }

    /// What a process that runs this layout does with `published`, the layout its
    /// directory holds now (see [`Judgment`]).
    pub(crate) fn judge(&self, published: &Layout) -> Judgment {
        if published == self {
            Judgment::Same
        } else if self.is_followed_by(published) {
            Judgment::Next
        } else if published.epoch > self.epoch {
            Judgment::Restart
        } else {
            Judgment::Contradicts
        }
    }

    /// The layout as bytes, the value a directory publishes (JSON with a format tag).
    ///
    /// ```
    /// # use ydb_coordination::space::Layout;
    /// let bytes = Layout::new(1, ["a"])?.to_bytes();
    /// assert!(std::str::from_utf8(&bytes).is_ok());
    /// # Ok::<(), ydb_coordination::Error>(())
    /// ```
    pub fn to_bytes(&self) -> Vec<u8> {
        let wire = Wire {
            format: FORMAT.to_string(),
            epoch: self.epoch,
            nodes: self.nodes.clone(),
            next: self.next.clone(),
        };
        serde_json::to_vec(&wire).unwrap_or_default()
    }

    /// The layout [`Layout::to_bytes`] made.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] for bytes that are not a layout (another format,
    /// malformed JSON, a node set [`Layout::new`] refuses).
    ///
    /// ```
    /// # use ydb_coordination::space::Layout;
    /// assert!(Layout::from_bytes(b"{}").is_err());
    /// ```
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let wire: Wire = serde_json::from_slice(bytes).map_err(|e| {
            Error::with_source(
                ErrorKind::InvalidArgument,
                "the published value is not a lock-space layout; publish one with `ydb-coord space init`",
                e,
            )
        })?;
        if wire.format != FORMAT {
            return Err(invalid(format!(
                "the layout's format is {:?}, not {FORMAT:?}; upgrade this process",
                wire.format
            )));
        }
        let stable = Self::new(wire.epoch, wire.nodes)?;
        match wire.next {
            None => Ok(stable),
            Some(next) if wire.epoch >= 2 => Ok(Self {
                next: Some(node_set(next)?),
                ..stable
            }),
            Some(_) => Err(invalid("a transition's epoch is at least 2")),
        }
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "epoch {}: {}", self.epoch, self.nodes.join(","))?;
        if let Some(next) = &self.next {
            write!(f, " -> {}", next.join(","))?;
        }
        Ok(())
    }
}

/// `nodes` checked, sorted and each once.
fn node_set<S: AsRef<str>>(nodes: impl IntoIterator<Item = S>) -> Result<Vec<String>> {
    let mut set = Vec::new();
    for node in nodes {
        let node = node.as_ref();
        if node.is_empty() || node.len() > MAX_NODE_NAME_LEN {
            return Err(invalid(format!(
                "node name {node:?} must be 1 to {MAX_NODE_NAME_LEN} bytes"
            )));
        }
        set.push(node.to_string());
    }
    set.sort_unstable();
    set.dedup();
    if set.is_empty() {
        return Err(invalid("a layout needs at least one node"));
    }
    if set.len() > MAX_NODES {
        return Err(invalid(format!(
            "a layout names at most {MAX_NODES} nodes, not {}",
            set.len()
        )));
    }
    Ok(set)
}

fn invalid(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidArgument, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_published_layout_is_judged_against_the_one_run() {
        let a = Layout::new(3, ["a", "b"]).unwrap();
        let moving = a.add_node("c").unwrap();
        let done = moving.finish().unwrap();
        assert_eq!(a.judge(&a), Judgment::Same);
        assert_eq!(a.judge(&moving), Judgment::Next);
        assert_eq!(moving.judge(&done), Judgment::Next);
        // A gap, or an epoch on that is not the next step.
        assert_eq!(a.judge(&done), Judgment::Restart);
        assert_eq!(
            a.judge(&a.remove_node("b").unwrap().finish().unwrap()),
            Judgment::Restart
        );
        let other = Layout::new(4, ["x"]).unwrap();
        assert_eq!(a.judge(&other), Judgment::Restart);
        // The same epoch with other nodes, or an older epoch.
        assert_eq!(
            a.judge(&Layout::new(3, ["a", "c"]).unwrap()),
            Judgment::Contradicts
        );
        assert_eq!(moving.judge(&a), Judgment::Contradicts);
        assert_eq!(
            a.judge(&Layout::new(1, ["a", "b"]).unwrap()),
            Judgment::Contradicts
        );
    }

    fn layout(epoch: u64, nodes: &[&str]) -> Layout {
        Layout::new(epoch, nodes.iter().copied()).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn epochs_step_by_one_through_a_transition() {
        let a = layout(5, &["a", "b"]);
        let t = a.add_node("c").unwrap_or_else(|e| panic!("{e}"));
        let b = t.finish().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((a.epoch(), t.epoch(), b.epoch()), (5, 6, 7));
        assert_eq!(t.all_nodes(), ["a", "b", "c"]);
        assert_eq!(b.nodes(), ["a", "b", "c"]);
        assert!(!b.is_transition());
    }

    #[test]
    fn refused_steps_have_kinds() {
        let a = layout(1, &["a"]);
        let t = a.add_node("b").unwrap_or_else(|e| panic!("{e}"));
        let kind = |r: Result<Layout>| r.err().map(|e| e.kind());
        assert_eq!(kind(a.finish()), Some(ErrorKind::PreconditionFailed));
        assert_eq!(kind(t.add_node("c")), Some(ErrorKind::PreconditionFailed));
        assert_eq!(kind(a.add_node("a")), Some(ErrorKind::PreconditionFailed));
        assert_eq!(kind(a.remove_node("a")), Some(ErrorKind::InvalidArgument));
        assert_eq!(kind(a.add_node("")), Some(ErrorKind::InvalidArgument));
        let long = "x".repeat(MAX_NODE_NAME_LEN + 1);
        assert_eq!(kind(a.add_node(&long)), Some(ErrorKind::InvalidArgument));
        assert_eq!(
            kind(Layout::new(0, ["a"])),
            Some(ErrorKind::InvalidArgument)
        );
        assert_eq!(
            kind(Layout::new(1, Vec::<String>::new())),
            Some(ErrorKind::InvalidArgument)
        );
    }

    #[test]
    fn a_transition_places_a_moved_name_twice_old_first() {
        let a = layout(1, &["a", "b", "c"]);
        let t = a.add_node("d").unwrap_or_else(|e| panic!("{e}"));
        let b = t.finish().unwrap_or_else(|e| panic!("{e}"));
        let (mut moved, mut stayed) = (0, 0);
        for i in 0..2000 {
            let name = format!("job-{i}");
            let (pa, pt, pb) = (a.parts(&name), t.parts(&name), b.parts(&name));
            assert_eq!(pa.len(), 1);
            assert_eq!(pb.len(), 1);
            assert_eq!(pt[0].node, pa[0].node, "the old place comes first");
            assert_eq!(
                pt[pt.len() - 1].node,
                pb[0].node,
                "the new place comes last"
            );
            if pt.len() == 2 {
                moved += 1;
                assert_eq!(pb[0].node, "d", "names move only onto the new node");
                assert!(pt[0].old && !pt[0].new && !pt[1].old && pt[1].new);
            } else {
                stayed += 1;
                assert!(pt[0].old && pt[0].new);
            }
        }
        assert!(
            moved > 300 && stayed > 1200,
            "{moved} moved, {stayed} stayed"
        );
    }

    /// The token rule orders every holder of a name after the ones before it, on a
    /// history where holders of A, A+B and B alternate in the two phases.
    #[test]
    fn tokens_grow_across_both_phases_of_a_move() {
        let a = layout(1, &["n1"]);
        let t = a.begin(["n2"]).unwrap_or_else(|e| panic!("{e}"));
        let b = t.finish().unwrap_or_else(|e| panic!("{e}"));
        // Order ids on each node grow with each holder that takes a place there.
        let (mut o1, mut o2) = (100u64, 1u64);
        let mut last = FencingToken::default();
        let mut step = |token: FencingToken| {
            assert!(token > last, "{token} after {last}");
            last = token;
        };
        // Phase one: A and A+B alternate, the transition is what is published.
        for i in 0..6 {
            o1 += 1;
            if i % 2 == 0 {
                step(a.token(&[o1], None));
            } else {
                o2 += 1;
                step(t.token(&[o1, o2], Some(t.epoch())));
            }
        }
        // Phase two: B is published; A+B and B alternate.
        for i in 0..6 {
            o2 += 1;
            if i % 2 == 0 {
                o1 += 1;
                step(t.token(&[o1, o2], Some(b.epoch())));
            } else {
                step(b.token(&[o2], None));
            }
        }
    }

    #[test]
    fn advance_needs_the_next_step_and_no_lagging_member() {
        let a = layout(1, &["a"]);
        let t = a.add_node("b").unwrap_or_else(|e| panic!("{e}"));
        let b = t.finish().unwrap_or_else(|e| panic!("{e}"));
        assert!(a.check_advance(&t, [(1, 1), (2, 1)]).is_ok());
        assert!(a.check_advance(&t, []).is_ok());
        assert!(t.check_advance(&b, [(1, 2), (2, 3)]).is_ok());
        let kind = |r: Result<()>| r.err().map(|e| e.kind());
        assert_eq!(
            kind(t.check_advance(&b, [(1, 2), (2, 1)])),
            Some(ErrorKind::PreconditionFailed)
        );
        // Skipping the transition, or a step from elsewhere, is refused.
        assert_eq!(
            kind(a.check_advance(&b, [])),
            Some(ErrorKind::PreconditionFailed)
        );
        let other = layout(1, &["z"])
            .add_node("b")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            kind(a.check_advance(&other, [])),
            Some(ErrorKind::PreconditionFailed)
        );
        let two = layout(1, &["a"])
            .add_node("b")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(two.lagging([(9, 1), (3, 1), (4, 2)])[0].session_id, 3);
    }

    #[test]
    fn bytes_round_trip_and_bad_values_are_refused() {
        let t = layout(1, &["a", "b"])
            .remove_node("a")
            .unwrap_or_else(|e| panic!("{e}"));
        for l in [layout(3, &["x"]), t.clone()] {
            assert_eq!(Layout::from_bytes(&l.to_bytes()).ok(), Some(l));
        }
        let bad: [&[u8]; 6] = [
            b"",
            b"not json",
            br#"{"format":"other/1","epoch":1,"nodes":["a"]}"#,
            br#"{"format":"ydb-coordination/lock-space-layout/1","epoch":0,"nodes":["a"]}"#,
            br#"{"format":"ydb-coordination/lock-space-layout/1","epoch":1,"nodes":["a"],"next":["b"]}"#,
            br#"{"format":"ydb-coordination/lock-space-layout/1","epoch":1,"nodes":["a"],"extra":1}"#,
        ];
        for b in bad {
            assert_eq!(
                Layout::from_bytes(b).err().map(|e| e.kind()),
                Some(ErrorKind::InvalidArgument),
                "{}",
                String::from_utf8_lossy(b)
            );
        }
    }
}
