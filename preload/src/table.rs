//! One lock-free table of addresses, for every set or map of the preload library keyed by an
//! address: the sampled blocks still alive (`memory::live`), the program's mappings
//! (`memory::mapped`), Python's arenas (`memory::regions`). Fixed capacity, built in a
//! `static` at compile time; each operation is a bounded probe of atomics, so it runs in
//! allocation hooks and signal handlers: no allocation, no locks, no panics.
//!
//! Open addressing with linear probing over at most `PROBES` slots from the key's home slot. A
//! slot's key is [`EMPTY`] (never used: a lookup stops there), [`GONE`] (removed: an insert may
//! take it again, a lookup goes on past it) or an address. An insert claims a free slot with a
//! compare-exchange, then stores its value; a remove swaps the key for [`GONE`], then reads the
//! value. A key is not looked for before it is inserted: the callers never insert one that is
//! there. When the `PROBES` slots of a key are all taken the table is full for it: the insert
//! says so and the caller does without (each says how).
//!
//! The caller hashes: each table keeps the hash that suits its keys (the page number of a
//! mapping, the 16-byte granule of a block), and passes it with the key to every call.

use core::sync::atomic::{AtomicUsize, Ordering};

/// A slot never used.
const EMPTY: usize = 0;
/// A slot whose key was removed.
const GONE: usize = 1;

/// Whether `key` can be stored (0 and 1 mark free slots).
#[inline(always)]
pub const fn storable(key: usize) -> bool {
    key > GONE
}

/// What a slot holds beside its key: `()` for a set, an [`AtomicUsize`] for a map.
pub trait Value {
    /// What is stored and read back.
    type Plain: Copy;
    /// A slot's value before anything was stored.
    const NEW: Self;
    fn set(&self, value: Self::Plain);
    fn get(&self) -> Self::Plain;
    fn reset(&self);
}

impl Value for () {
    type Plain = ();
    const NEW: Self = ();
    #[inline(always)]
    fn set(&self, _: ()) {}
    #[inline(always)]
    fn get(&self) {}
    #[inline(always)]
    fn reset(&self) {}
}

impl Value for AtomicUsize {
    type Plain = usize;
    #[allow(clippy::declare_interior_mutable_const)] // used only as an array initialiser
    const NEW: Self = AtomicUsize::new(0);
    #[inline(always)]
    fn set(&self, value: usize) {
        self.store(value, Ordering::Release);
    }
    #[inline(always)]
    fn get(&self) -> usize {
        self.load(Ordering::Acquire)
    }
    #[inline(always)]
    fn reset(&self) {
        self.store(0, Ordering::Relaxed);
    }
}

/// `SLOTS` (a power of two) keys and their values, each key looked for in at most `PROBES`
/// slots. Keys and values are apart, so a probe reads keys only.
pub struct Table<V: Value, const SLOTS: usize, const PROBES: usize> {
    keys: [AtomicUsize; SLOTS],
    values: [V; SLOTS],
}

impl<V: Value, const SLOTS: usize, const PROBES: usize> Table<V, SLOTS, PROBES> {
    pub const fn new() -> Self {
        const { assert!(SLOTS.is_power_of_two() && PROBES <= SLOTS) };
        Table {
            keys: [const { AtomicUsize::new(EMPTY) }; SLOTS],
            values: [const { V::NEW }; SLOTS],
        }
    }

    /// The slots a key of this `hash` may be in, in probe order. The mask keeps every index in
    /// range, which the compiler sees: no bounds check is left.
    #[inline(always)]
    fn probe(&self, hash: usize) -> impl Iterator<Item = (&AtomicUsize, &V)> {
        (0..PROBES).filter_map(move |probe| {
            let i = hash.wrapping_add(probe) & (SLOTS - 1);
            Some((self.keys.get(i)?, self.values.get(i)?))
        })
    }

    /// Store `key` (hashed to `hash`) with `value`. `false` if its slots are all taken, or the
    /// key cannot be stored (0 or 1).
    #[inline]
    pub fn insert(&self, hash: usize, key: usize, value: V::Plain) -> bool {
        if !storable(key) {
            return false;
        }
        for (slot, stored) in self.probe(hash) {
            let was = slot.load(Ordering::Relaxed);
            if (was == EMPTY || was == GONE)
                && slot
                    .compare_exchange(was, key, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                stored.set(value);
                return true;
            }
        }
        false
    }

    /// Remove `key` (hashed to `hash`); its value, or `None` if it was not there (or another
    /// thread removed it first).
    #[inline]
    pub fn remove(&self, hash: usize, key: usize) -> Option<V::Plain> {
        if !storable(key) {
            return None;
        }
        for (slot, stored) in self.probe(hash) {
            let was = slot.load(Ordering::Acquire);
            if was == EMPTY {
                return None;
            }
            if was == key
                && slot
                    .compare_exchange(key, GONE, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                return Some(stored.get());
            }
        }
        None
    }

    /// Remove every entry `pick` chooses (given its key and value), handing each to `take`
    /// with its value. Reads the whole table: for what no key's hash can find (a range).
    pub fn remove_each(
        &self,
        mut pick: impl FnMut(usize, V::Plain) -> bool,
        mut take: impl FnMut(usize, V::Plain),
    ) {
        for (slot, stored) in self.keys.iter().zip(&self.values) {
            let key = slot.load(Ordering::Acquire);
            if !storable(key) || !pick(key, stored.get()) {
                continue;
            }
            if slot
                .compare_exchange(key, GONE, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                take(key, stored.get());
            }
        }
    }

    /// Forget everything (a fork child's table, before its other threads could run again).
    pub fn clear(&self) {
        for (slot, stored) in self.keys.iter().zip(&self.values) {
            slot.store(EMPTY, Ordering::Relaxed);
            stored.reset();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every key hashed to the same home slot: probing and fullness are what is tested.
    const HOME: usize = 5;

    #[test]
    fn inserted_keys_are_found_once_with_their_values() {
        let t: Table<AtomicUsize, 64, 8> = Table::new();
        for k in 2..10 {
            assert!(t.insert(k * 7, k, k * 100));
        }
        assert_eq!(t.remove(3 * 7, 30), None, "never inserted");
        assert_eq!(t.remove(3 * 7, 3), Some(300));
        assert_eq!(t.remove(3 * 7, 3), None, "removed once");
        for k in (2..10).filter(|&k| k != 3) {
            assert_eq!(t.remove(k * 7, k), Some(k * 100), "{k}");
        }
    }

    #[test]
    fn keys_0_and_1_are_refused() {
        let t: Table<(), 8, 8> = Table::new();
        assert!(!t.insert(0, 0, ()));
        assert!(!t.insert(1, 1, ()));
        assert_eq!(t.remove(0, 0), None);
        assert_eq!(t.remove(1, 1), None);
        assert!(t.insert(2, 2, ()));
        assert_eq!(t.remove(1, 1), None, "GONE is not a key");
    }

    #[test]
    fn a_full_probe_refuses_and_a_removed_slot_is_taken_again() {
        let t: Table<AtomicUsize, 16, 4> = Table::new();
        for k in 10..14 {
            assert!(t.insert(HOME, k, k));
        }
        assert!(!t.insert(HOME, 14, 14), "its 4 slots are taken");
        // Another home whose probe does not reach them still has room.
        assert!(t.insert(HOME + 4, 20, 20));
        // A tombstone: the keys past it are still found, and an insert reuses it.
        assert_eq!(t.remove(HOME, 11), Some(11));
        assert_eq!(t.remove(HOME, 13), Some(13), "found past the tombstone");
        assert!(t.insert(HOME, 14, 140));
        assert!(t.insert(HOME, 15, 150));
        assert!(!t.insert(HOME, 16, 160), "full again");
        assert_eq!(t.remove(HOME, 14), Some(140));
        assert_eq!(t.remove(HOME, 15), Some(150));
        // A probe that wraps past the last slot.
        assert!(t.insert(15, 30, 3));
        assert!(t.insert(15, 31, 4));
        assert_eq!(t.remove(15, 31), Some(4));
    }

    #[test]
    fn remove_each_takes_what_it_picks_and_clear_empties() {
        let t: Table<AtomicUsize, 64, 8> = Table::new();
        for k in 2..12 {
            assert!(t.insert(k, k, k * 10));
        }
        let mut taken = Vec::new();
        t.remove_each(|k, _| k % 2 == 0, |k, v| taken.push((k, v)));
        taken.sort();
        assert_eq!(taken, [(2, 20), (4, 40), (6, 60), (8, 80), (10, 100)]);
        assert_eq!(t.remove(4, 4), None);
        assert_eq!(t.remove(5, 5), Some(50));
        t.clear();
        assert_eq!(t.remove(7, 7), None);
        assert!(t.insert(7, 7, 1));
    }

    #[test]
    fn concurrent_inserts_and_removes_lose_nothing() {
        static T: Table<AtomicUsize, { 1 << 14 }, 64> = Table::new();
        let hash = |k: usize| k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 50;
        const THREADS: usize = 8;
        const EACH: usize = 1000;
        std::thread::scope(|s| {
            for t in 0..THREADS {
                s.spawn(move || {
                    for i in 0..EACH {
                        let k = 2 + t * EACH + i;
                        assert!(T.insert(hash(k), k, k + 1));
                    }
                });
            }
        });
        // Every key once, each removed by exactly one of several racing threads.
        let found = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    for k in 2..2 + THREADS * EACH {
                        if let Some(v) = T.remove(hash(k), k) {
                            assert_eq!(v, k + 1);
                            found.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(found.load(Ordering::Relaxed), THREADS * EACH);
        let mut left = 0;
        T.remove_each(|_, _| true, |_, _| left += 1);
        assert_eq!(left, 0);
    }

    #[test]
    fn threads_racing_for_the_same_slots_each_get_their_own() {
        for _ in 0..50 {
            let t: Table<AtomicUsize, 64, 32> = Table::new();
            std::thread::scope(|s| {
                for th in 0..8 {
                    let t = &t;
                    s.spawn(move || {
                        for i in 0..4 {
                            let k = 2 + th * 4 + i;
                            assert!(t.insert(HOME, k, k * 3));
                        }
                    });
                }
            });
            assert!(!t.insert(HOME, 99, 0), "the 32 slots hold the 32 keys");
            for k in 2..34 {
                assert_eq!(t.remove(HOME, k), Some(k * 3), "{k}");
            }
        }
    }
}
