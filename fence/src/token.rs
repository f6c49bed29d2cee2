//! What a fenced write carries: the token (with the node's incarnation), and a write id.

use std::fmt;

use ydb_coordination::FencingToken;
use ydb_coordination::config::NodeIncarnation;

use crate::error::{Error, ErrorKind, Result};

/// A fencing token as a resource compares it: the coordination node's
/// [incarnation](NodeIncarnation), then the lock's [`FencingToken`] (`(epoch, order id)`).
///
/// The incarnation keeps tokens ordered when the coordination node is dropped and created
/// again: the new node's order ids start at 1, but its incarnation is greater, so its holders
/// are accepted and the old node's refused. A token made from a guard's `FencingToken` alone
/// has no incarnation (zero): use [`Token::incarnation`] with
/// [`Client::node_incarnation`](ydb_coordination::Client::node_incarnation) when the node may be
/// recreated. A token of a lock space carries the space's epoch and no incarnation: the space
/// orders its own moves between nodes.
///
/// A token is 256 bits; every adapter stores it whole, as 64 hex digits
/// ([`Token::to_hex`]), which sort as the tokens do: nothing is rounded into a double or cut
/// to 64 bits.
///
/// # Examples
///
/// ```
/// use ydb_coordination::FencingToken;
/// use ydb_coordination::config::NodeIncarnation;
/// use ydb_coordination_fence::Token;
///
/// let old_node = NodeIncarnation { plan_step: 1_000, tx_id: 1 };
/// let new_node = NodeIncarnation { plan_step: 2_000, tx_id: 1 };
/// let before = Token::new(FencingToken::new(0, 900)).incarnation(old_node);
/// let after = Token::new(FencingToken::new(0, 1)).incarnation(new_node);
/// assert!(after > before);
/// assert_eq!(Token::from_hex(&after.to_hex())?, after);
/// # Ok::<(), ydb_coordination_fence::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Token {
    // The field order is the comparison order (the derived `Ord`).
    incarnation: NodeIncarnation,
    fencing: FencingToken,
}

impl Token {
    /// The token of a guard, without an incarnation.
    ///
    /// ```
    /// # use ydb_coordination::FencingToken;
    /// # use ydb_coordination_fence::Token;
    /// assert!(Token::new(FencingToken::new(0, 8)) > Token::new(FencingToken::new(0, 7)));
    /// ```
    pub const fn new(fencing: FencingToken) -> Self {
        Self {
            incarnation: NodeIncarnation {
                plan_step: 0,
                tx_id: 0,
            },
            fencing,
        }
    }

    /// The same token of the node incarnation `incarnation`.
    pub const fn incarnation(mut self, incarnation: NodeIncarnation) -> Self {
        self.incarnation = incarnation;
        self
    }

    /// The node incarnation (zero when none was given).
    pub const fn node_incarnation(&self) -> NodeIncarnation {
        self.incarnation
    }

    /// The lock's fencing token.
    pub const fn fencing(&self) -> FencingToken {
        self.fencing
    }

    /// The token as 64 lowercase hex digits: the incarnation's plan step and transaction id,
    /// the epoch and the order id, 16 digits each. Two encodings compare byte by byte as the
    /// tokens do.
    ///
    /// ```
    /// # use ydb_coordination::FencingToken;
    /// # use ydb_coordination_fence::Token;
    /// let hex = Token::new(FencingToken::new(1, 255)).to_hex();
    /// assert_eq!(hex.len(), 64);
    /// assert!(hex.ends_with("000000000000000100000000000000ff"));
    /// ```
    pub fn to_hex(&self) -> String {
        format!(
            "{:016x}{:016x}{:016x}{:016x}",
            self.incarnation.plan_step,
            self.incarnation.tx_id,
            self.fencing.epoch,
            self.fencing.order
        )
    }

    /// The token [`Token::to_hex`] wrote.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Corrupt`] if `hex` is not 64 lowercase hex digits.
    pub fn from_hex(hex: &str) -> Result<Self> {
        let corrupt = || {
            Error::new(
                ErrorKind::Corrupt,
                format!("{hex:?} is not a fencing token (64 lowercase hex digits)"),
            )
        };
        if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(corrupt());
        }
        let part = |i: usize| {
            hex.get(i * 16..(i + 1) * 16)
                .and_then(|s| u64::from_str_radix(s, 16).ok())
                .ok_or_else(corrupt)
        };
        Ok(Self {
            incarnation: NodeIncarnation {
                plan_step: part(0)?,
                tx_id: part(1)?,
            },
            fencing: FencingToken::new(part(2)?, part(3)?),
        })
    }
}

impl From<FencingToken> for Token {
    fn from(fencing: FencingToken) -> Self {
        Self::new(fencing)
    }
}

/// The guard's token (`order` on a node, `e<epoch>:<order>` in a space), then `@plan_step.tx_id`
/// when it has an incarnation.
///
/// ```
/// # use ydb_coordination::{FencingToken, config::NodeIncarnation};
/// # use ydb_coordination_fence::Token;
/// let token = Token::new(FencingToken::new(0, 17));
/// assert_eq!(token.to_string(), "17");
/// let inc = NodeIncarnation { plan_step: 5, tx_id: 6 };
/// assert_eq!(token.incarnation(inc).to_string(), "17@5.6");
/// ```
impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.fencing)?;
        if self.incarnation != NodeIncarnation::default() {
            write!(
                f,
                "@{}.{}",
                self.incarnation.plan_step, self.incarnation.tx_id
            )?;
        }
        Ok(())
    }
}

/// The id of one logical write, so that a retry after an unknown outcome (a timeout, a broken
/// connection) returns the first outcome instead of applying the write twice.
///
/// Make one per logical write, before its first attempt, and keep it across the retries. The
/// adapters remember a write id for a while (each says how long) once the write it names was
/// applied.
///
/// ```
/// use ydb_coordination_fence::WriteId;
///
/// let id = WriteId::random();
/// assert_eq!(id.to_string().len(), 32);
/// assert_eq!(WriteId::new(255).to_string(), "000000000000000000000000000000ff");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WriteId(u128);

impl WriteId {
    /// The write id `id` (unique per name, at least while the store remembers it).
    pub const fn new(id: u128) -> Self {
        Self(id)
    }

    /// A random write id.
    pub fn random() -> Self {
        Self(rand::random())
    }

    /// The id as a number.
    pub const fn get(self) -> u128 {
        self.0
    }
}

/// 32 lowercase hex digits, as the adapters store it.
impl fmt::Display for WriteId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(plan_step: u64, tx_id: u64, epoch: u64, order: u64) -> Token {
        Token::new(FencingToken::new(epoch, order))
            .incarnation(NodeIncarnation { plan_step, tx_id })
    }

    #[test]
    fn hex_orders_as_the_tokens_do_and_keeps_every_bit() {
        let max = u64::MAX;
        let tokens = [
            token(0, 0, 0, 0),
            token(0, 0, 0, 1),
            token(0, 0, 0, max),
            token(0, 0, 1, 0),
            token(0, 0, max, max - 1),
            token(0, 0, max, max),
            token(0, 1, 0, 0),
            token(1, 0, 0, 0),
            token(max, max, max, max - 1),
            token(max, max, max, max),
        ];
        for pair in tokens.windows(2) {
            assert!(pair[0] < pair[1]);
            assert!(pair[0].to_hex() < pair[1].to_hex());
        }
        for t in tokens {
            assert_eq!(Token::from_hex(&t.to_hex()).unwrap(), t);
        }
    }

    #[test]
    fn anything_but_64_lowercase_hex_digits_is_corrupt() {
        let good = token(0xabc, 0xdef, 3, 4).to_hex();
        for bad in [
            String::new(),
            good[1..].to_string(),
            format!("{good}0"),
            good.to_uppercase(),
            good.replacen('0', "g", 1),
            good.replacen('0', "+", 1),
            format!("{}é", &good[..62]),
        ] {
            assert_eq!(
                Token::from_hex(&bad).unwrap_err().kind(),
                ErrorKind::Corrupt,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_guard_token_has_no_incarnation_and_orders_below_any_incarnation() {
        let plain = Token::from(FencingToken::new(9, 9));
        assert_eq!(plain.node_incarnation(), NodeIncarnation::default());
        assert!(plain < token(0, 1, 0, 1));
    }
}
