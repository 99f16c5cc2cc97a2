//! A fixed table of the non-zero keys seen (kernel handles, kernel names' addresses), shared by
//! threads without locks: a key is looked for in a bounded number of slots from its hash, and
//! taken with one compare-and-swap into a free one. A key that finds neither itself nor a free
//! slot is told apart ([`Seen::check`] says `None`): the caller decides what "full" means. A
//! seen key costs plain loads, no locked instruction.

use core::sync::atomic::{AtomicU64, Ordering};

/// Slots probed from a key's hash.
const PROBES: usize = 64;

/// A table of `N` slots.
pub struct Seen<const N: usize> {
    slots: [AtomicU64; N],
}

impl<const N: usize> Seen<N> {
    /// An empty table.
    pub const fn new() -> Self {
        Seen {
            slots: [const { AtomicU64::new(0) }; N],
        }
    }

    fn start(key: u64) -> usize {
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as usize % N.max(1)
    }

    /// Whether `key` is new (`Some(true)`, and now recorded) or was seen (`Some(false)`);
    /// `None` when it found neither itself nor a free slot (the table is full there). 0 is
    /// taken as 1.
    pub fn check(&self, key: u64) -> Option<bool> {
        let key = key.max(1);
        for i in 0..PROBES {
            let slot = self.slots.get((Self::start(key) + i) % N.max(1))?;
            match slot.load(Ordering::Acquire) {
                k if k == key => return Some(false),
                0 => match slot.compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => return Some(true),
                    Err(k) if k == key => return Some(false),
                    Err(_) => {}
                },
                _ => {}
            }
        }
        None
    }

    /// Whether `key` is new (a full table counts as seen).
    pub fn first(&self, key: u64) -> bool {
        self.check(key) == Some(true)
    }

    /// Forget `key`, so that it is new again.
    pub fn forget(&self, key: u64) {
        let key = key.max(1);
        for i in 0..PROBES {
            if let Some(slot) = self.slots.get((Self::start(key) + i) % N.max(1)) {
                if slot
                    .compare_exchange(key, 0, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_new_once_until_forgotten_and_a_full_table_says_seen() {
        static T: Seen<8> = Seen::new();
        assert!(T.first(42));
        assert!(!T.first(42));
        T.forget(42);
        assert!(T.first(42));
        let news = (100..200u64).filter(|&k| T.first(k)).count();
        assert_eq!(news, 7, "eight slots, one of them 42's");
        assert_eq!(T.check(1000), None, "full");
        assert!(!T.first(1000), "full: taken as seen by `first`");
    }
}
