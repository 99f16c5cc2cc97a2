//! The event store's tests: waiting samples merged, timed waits spread, looks scaled.

use mlprof_wire::{sample_flags, MAX_FRAMES};

use super::*;

#[test]
fn a_thread_asleep_for_hours_keeps_a_bounded_number_of_waiting_samples() {
    let mut d = Decoded::default();
    let tick = 20_000_000u64;
    let hours = 2 * 3600 * 1_000_000_000u64;
    let stack = |line: i32| vec![(7u32, line), (3, 40)];
    let mut pushed = 0u64;
    let mut t = 0;
    while t < hours {
        // Thread 1 always waits on one line; thread 2 switches lines every minute.
        for (tid, line) in [(1, 10), (2, 20 + (t / 60_000_000_000) as i32 % 2)] {
            d.push_waiting(CpuSample {
                t_ns: t,
                tid,
                ip: 0,
                weight_ns: tick,
                flags: sample_flags::WAITING,
                frames: stack(line),
                caller: 0,
                fault_ns: 0,
            });
            pushed += 1;
        }
        t += tick;
    }
    assert_eq!(pushed, 720_000);
    let kept = d.samples.len();
    assert!(kept < 16_000, "{kept} samples kept of {pushed}");
    let weight: u64 = d.samples.iter().map(|s| s.weight_ns).sum();
    assert_eq!(weight, pushed * tick, "no waiting time lost");
    for tid in [1, 2] {
        let of = |s: &&CpuSample| s.tid == tid;
        let w: u64 = d.samples.iter().filter(of).map(|s| s.weight_ns).sum();
        assert_eq!(w, hours, "thread {tid}");
    }
    // Merged samples never mix stacks, and none strays from its time by more than the
    // merge window (a thousandth of the run).
    for s in &d.samples {
        assert!(s.frames == stack(10) || s.tid == 2);
        let width = MERGE_FLOOR_NS
            .max(s.t_ns / MERGE_DIVISOR)
            .next_power_of_two();
        assert!(
            s.weight_ns <= 2 * width,
            "{} ns merged at {} ns",
            s.weight_ns,
            s.t_ns
        );
    }
}

#[test]
fn looks_are_scaled_by_the_timed_waits_after_the_first_look_only() {
    let mut d = Decoded::default();
    let both = sample_flags::WAITED | sample_flags::WAITING;
    // A 100 ms timed wait before the collector first looked at the thread, then 300 ms of
    // looks for 200 ms blocked: the looks get all 200 ms.
    d.push_timed_wait(CpuSample {
        t_ns: 1_000_000_000,
        tid: 8,
        weight_ns: 100_000_000,
        flags: both,
        frames: vec![(3, 70)],
        ..CpuSample::default()
    });
    d.push_waiting(CpuSample {
        t_ns: 2_000_000_000,
        tid: 8,
        weight_ns: 300_000_000,
        flags: sample_flags::WAITING,
        frames: vec![(3, 80)],
        ..CpuSample::default()
    });
    d.clocks.insert(
        8,
        super::super::waits::ThreadClocks {
            first_ns: 1_500_000_000,
            blocked_ns: 200_000_000,
            ..Default::default()
        },
    );
    let events = d.take_events();
    let look: u64 = events
        .samples
        .iter()
        .filter(|s| s.flags & sample_flags::WAITED == 0)
        .map(|s| s.weight_ns)
        .sum();
    assert_eq!(look, 200_000_000);
}

#[test]
fn an_absurd_timed_wait_is_spread_into_a_bounded_number_of_pieces() {
    // The longest wait a record may declare (`decode::MAX_WAIT_NS`).
    const LONGEST_NS: u64 = 1 << 50;
    let mut d = Decoded::default();
    let frames: Vec<(u32, i32)> = (0..MAX_FRAMES as u32).map(|i| (i, 0)).collect();
    d.push_timed_wait(CpuSample {
        t_ns: LONGEST_NS,
        weight_ns: LONGEST_NS,
        flags: sample_flags::WAITED | sample_flags::WAITING,
        frames,
        ..CpuSample::default()
    });
    let held: usize = d.samples.iter().map(|s| s.frames.len()).sum();
    assert!(held <= 2 * MAX_SPREAD_FRAMES, "{} pieces", d.samples.len());
    let weight: u64 = d.samples.iter().map(|s| s.weight_ns).sum();
    assert_eq!(weight, LONGEST_NS, "nothing lost");
}
