//! The fencing rule itself, pure: what a store does with a write given its mark. The memory
//! store and the object-store adapter (whose check runs in the client, made atomic by a
//! compare-and-swap) decide with it; the SQL, Lua and YQL of the other adapters state the same
//! rule in the store's language.

use crate::outcome::Outcome;
use crate::token::Token;

/// What to do with a write or claim carrying `token` when the name's mark is `mark`, and
/// `replayed` tells whether its write id was applied before.
pub(crate) fn judge(mark: Option<Token>, token: Token, replayed: bool) -> Outcome {
    match mark {
        _ if replayed => Outcome::Applied,
        Some(current) if current > token => Outcome::Stale { current },
        _ => Outcome::Applied,
    }
}

#[cfg(test)]
mod tests {
    use ydb_coordination::FencingToken;

    use super::*;

    fn t(order: u64) -> Token {
        Token::new(FencingToken::new(0, order))
    }

    #[test]
    fn equal_and_greater_tokens_pass_lower_ones_are_stale() {
        assert_eq!(judge(None, t(1), false), Outcome::Applied);
        assert_eq!(judge(Some(t(5)), t(5), false), Outcome::Applied);
        assert_eq!(judge(Some(t(5)), t(6), false), Outcome::Applied);
        assert_eq!(
            judge(Some(t(5)), t(4), false),
            Outcome::Stale { current: t(5) }
        );
    }

    #[test]
    fn a_replayed_write_keeps_its_first_outcome_whatever_the_mark() {
        assert_eq!(judge(Some(t(9)), t(4), true), Outcome::Applied);
    }
}
