//! Per-thread reentrancy guard: while a thread is inside mlprof's own sampling work (or inside
//! Python's allocator called from our wrapper), allocation hooks on that thread only count
//! bytes and forward, never sample again. Const-initialised, non-Drop thread-local: no lazy
//! init, no destructor, no allocation.

use core::cell::Cell;

std::thread_local! {
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
}

/// Proof that this thread is inside mlprof; released on drop.
pub struct Guard(());

impl Guard {
    /// Enter mlprof on this thread, or `None` if it is already inside.
    #[inline]
    pub fn acquire() -> Option<Guard> {
        ACTIVE.with(|active| (!active.replace(true)).then_some(Guard(())))
    }
}

/// Whether this thread is inside mlprof (a guard is held).
#[inline]
pub fn active() -> bool {
    ACTIVE.with(|a| a.get())
}

impl Drop for Guard {
    #[inline]
    fn drop(&mut self) {
        ACTIVE.with(|active| active.set(false));
    }
}

#[cfg(test)]
mod tests {
    use super::Guard;

    #[test]
    fn guard_is_not_reentrant_and_is_released() {
        let outer = Guard::acquire();
        assert!(outer.is_some());
        assert!(Guard::acquire().is_none());
        drop(outer);
        assert!(Guard::acquire().is_some());
    }
}
