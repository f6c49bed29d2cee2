//! The fencing token every lock carries, on one coordination node and in a lock space.

use std::fmt;

/// The fencing token of a lock: `(epoch, order id)`, compared in that order.
///
/// The order id is the server's `order_id` of the ownership: successive owners of one
/// semaphore get strictly increasing ones, and one owner keeps its own for the whole tenure.
/// A lock on one coordination node has epoch 0. A lock in a
/// [`LockSpace`](crate::space::LockSpace) carries the epoch of the layout whose place gave
/// the order id, so its tokens keep growing when the name moves between nodes (see
/// [fencing in a space](crate::space#fencing)).
///
/// A protected resource stores the greatest token it has seen for the name and refuses a
/// write carrying a smaller one. Where it stores one number, store
/// [`FencingToken::to_u128`]: it orders the same way (on one node it equals the order id).
///
/// # Examples
///
/// ```
/// use ydb_coordination::FencingToken;
///
/// let on_a_node = FencingToken::new(0, 41);
/// assert_eq!(on_a_node.to_u128(), 41);
/// let before_move = FencingToken::new(1, 900);
/// let after_move = FencingToken::new(3, 4);
/// assert!(after_move > before_move && before_move > on_a_node);
/// assert!(after_move.to_u128() > before_move.to_u128());
/// assert_eq!(FencingToken::from_u128(after_move.to_u128()), after_move);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct FencingToken {
    /// The epoch of the lock space's layout whose place gave the order id (0 on one node).
    pub epoch: u64,
    /// The server's order id of the ownership.
    pub order: u64,
}

impl FencingToken {
    /// The token `(epoch, order)`.
    ///
    /// ```
    /// # use ydb_coordination::FencingToken;
    /// assert!(FencingToken::new(2, 1) > FencingToken::new(1, 7));
    /// ```
    pub const fn new(epoch: u64, order: u64) -> Self {
        Self { epoch, order }
    }

    /// The token as one number, `epoch << 64 | order`, ordered as the token is.
    ///
    /// ```
    /// # use ydb_coordination::FencingToken;
    /// assert_eq!(FencingToken::new(1, 2).to_u128(), (1u128 << 64) | 2);
    /// assert_eq!(FencingToken::new(0, 2).to_u128(), 2);
    /// ```
    pub const fn to_u128(self) -> u128 {
        ((self.epoch as u128) << 64) | self.order as u128
    }

    /// The token [`FencingToken::to_u128`] made.
    ///
    /// ```
    /// # use ydb_coordination::FencingToken;
    /// assert_eq!(FencingToken::from_u128(5 << 64 | 9), FencingToken::new(5, 9));
    /// ```
    pub const fn from_u128(v: u128) -> Self {
        Self {
            epoch: (v >> 64) as u64,
            order: v as u64,
        }
    }
}

impl From<FencingToken> for u128 {
    fn from(token: FencingToken) -> Self {
        token.to_u128()
    }
}

/// The order id alone on one node (epoch 0), `e<epoch>:<order>` in a lock space: never a
/// form that reads as a decimal (`3.9` would look greater than `3.10`).
///
/// ```
/// # use ydb_coordination::FencingToken;
/// assert_eq!(FencingToken::new(0, 17).to_string(), "17");
/// assert_eq!(FencingToken::new(3, 17).to_string(), "e3:17");
/// ```
impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.epoch == 0 {
            write!(f, "{}", self.order)
        } else {
            write!(f, "e{}:{}", self.epoch, self.order)
        }
    }
}
