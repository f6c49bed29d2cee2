//! Hashing for the session's own ids (request, caller and subscriber ids): small numbers
//! handed out in sequence by the session, never chosen by a peer, so a multiply spreads them
//! well enough and the keyed SipHash of the default hasher buys nothing. Nothing iterates a
//! map keyed this way where order matters without sorting first.

/// The hasher builder of maps keyed by the session's own ids.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Ids;

impl std::hash::BuildHasher for Ids {
    type Hasher = IdHasher;

    fn build_hasher(&self) -> IdHasher {
        IdHasher(0)
    }
}

#[derive(Debug)]
pub(crate) struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, id: u64) {
        self.0 = (self.0 ^ id).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}
