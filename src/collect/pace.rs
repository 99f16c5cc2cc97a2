//! Keeping one kind of the collector's own work (reading `/proc`, looking at waiting threads)
//! to a share of one CPU, whatever the number of processes and threads it is done for: the
//! work is measured by the collector thread's own CPU clock (user and kernel time: a read of
//! `smaps_rollup` is kernel time), and work is done only while what it has cost stays within
//! the share of the time since collection began (see `docs/design/collector-cost.md`).

/// A budget for one kind of work.
#[derive(Clone, Copy, Debug)]
pub struct Pace {
    /// Share of one CPU the work may use over time (0.01: 1%).
    share: f64,
    /// What it may spend before any time has passed: the first readings of a run.
    burst_ns: u64,
    /// When collection began (ns on the collector's clock).
    start_ns: u64,
    /// CPU the work has cost so far (ns).
    spent_ns: u64,
}

impl Pace {
    /// A budget of `share` of one CPU from `start_ns` on, `burst_ns` of it at once.
    pub fn new(share: f64, burst_ns: u64, start_ns: u64) -> Self {
        Self {
            share,
            burst_ns,
            start_ns,
            spent_ns: 0,
        }
    }

    /// Whether the work may be done at `now_ns`: what it has cost is within its share.
    pub fn allowed(&self, now_ns: u64) -> bool {
        self.allowed_for(now_ns, 0)
    }

    /// Whether work expected to cost `cost_ns` may be done at `now_ns`: it stays within the
    /// share once done.
    pub fn allowed_for(&self, now_ns: u64, cost_ns: u64) -> bool {
        let earned = (now_ns.saturating_sub(self.start_ns) as f64 * self.share) as u64;
        self.spent_ns.saturating_add(cost_ns) <= earned.saturating_add(self.burst_ns)
    }

    /// Do `work`, counting what it costs.
    pub fn spend<T>(&mut self, work: impl FnOnce() -> T) -> T {
        let before = thread_cpu_ns();
        let out = work();
        self.spent_ns = self
            .spent_ns
            .saturating_add(thread_cpu_ns().saturating_sub(before));
        out
    }

    /// Count `ns` of work done (tests).
    #[cfg(test)]
    pub fn add(&mut self, ns: u64) {
        self.spent_ns = self.spent_ns.saturating_add(ns);
    }

    /// CPU the work has cost so far (ns).
    pub fn spent_ns(&self) -> u64 {
        self.spent_ns
    }
}

/// The calling thread's CPU time (user and kernel), in ns.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer; CLOCK_THREAD_CPUTIME_ID exists on every Linux.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU this process (every thread of the collector) has used so far, user and kernel, in ns.
pub fn process_cpu_ns() -> u64 {
    // SAFETY: rusage is plain data.
    let mut ru: libc::rusage = unsafe { core::mem::zeroed() };
    // SAFETY: a valid out-pointer.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0;
    }
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    ns(ru.ru_utime) + ns(ru.ru_stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_stops_when_its_cost_passes_its_share_and_resumes_as_time_passes() {
        let mut pace = Pace::new(0.01, 1_000_000, 0);
        assert!(pace.allowed(0));
        pace.add(2_000_001); // the 1 ms burst and 1 ms more
        assert!(!pace.allowed(0));
        // 1% of 100 ms is 1 ms: earned back after a little more than 100 ms.
        assert!(!pace.allowed(100_000_000));
        assert!(pace.allowed(100_000_100));
        // A read of 16 ms (smaps_rollup of a process that imported torch) waits 1.6 s more.
        pace.add(16_000_000);
        assert!(!pace.allowed(1_700_000_000));
        assert!(pace.allowed(1_700_000_100));
    }

    #[test]
    fn spending_is_measured_by_the_threads_own_clock() {
        let mut pace = Pace::new(0.01, 0, 0);
        let n = pace.spend(|| (0..2_000_000u64).fold(0u64, |a, i| a.wrapping_add(i * i)));
        std::hint::black_box(n);
        assert!(pace.spent_ns() > 0);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let before = pace.spent_ns();
        pace.spend(|| std::thread::sleep(std::time::Duration::from_millis(20)));
        // Sleeping costs no CPU: far less than the 20 ms it took.
        assert!(pace.spent_ns() - before < 5_000_000);
    }
}
