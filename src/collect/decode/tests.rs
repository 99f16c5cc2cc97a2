//! The decoder's tests: events reassembled from hand-made records, limits, tails, and what
//! reaches the event store through the decoder (compaction, shares).

use std::sync::Arc;

use mlprof_wire::{sample_flags, Frame, DATA_BYTES};

use super::*;
use crate::collect::events::{Events, COMPACT_FROM};

#[test]
fn a_tail_goes_to_the_latest_of_its_threads_samples() {
    let ms = 1_000_000;
    let stack = |line: i32| [(7u32, line), (3, 40)];
    let mut d = Decoder::default();
    for (t, line) in [(5, 10), (15, 11)] {
        let mut s = record(Kind::Sample);
        (s.a, s.b, s.c) = (0x1000 + line as u64, 10 * ms, 2);
        feed_event(&mut d, s, t * ms, &stack(line));
    }
    let mut tail = Record::new(Kind::Sample, 7, 30 * ms);
    (tail.b, tail.c) = (40 * ms, u64::from(sample_flags::TAIL) << 32);
    d.feed(&tail, 0);
    d.finish_pending();
    let events = d.out.take_events();
    let last = events.samples.last().unwrap();
    assert_eq!(
        (last.t_ns, last.weight_ns, last.ip, &last.frames[..]),
        (30 * ms, 40 * ms, 0x1000 + 11, &stack(11)[..])
    );
}

#[test]
fn a_tail_goes_where_its_thread_was_last_sampled_or_without_a_frame() {
    let ms = 1_000_000;
    let stack = |line: i32| [(7u32, line), (3, 40), (2, 12), (1, 5)];
    let mut d = Decoder::default();
    let mut s = record(Kind::Sample);
    (s.a, s.b, s.c) = (0x1000, 10 * ms, 4);
    feed_event(&mut d, s, 5 * ms, &stack(10));
    let tail = |tid: u32, weight: u64, depth: u64| {
        let mut t = Record::new(Kind::Sample, tid, 9 * ms);
        (t.b, t.c) = (weight, depth | u64::from(sample_flags::TAIL) << 32);
        t
    };
    d.feed(&tail(7, 900 * ms, 0), 0);
    // A thread never sampled keeps its time, with no frame; a tail that claims frames is not
    // counted.
    d.feed(&tail(8, 50 * ms, 0), 0);
    d.feed(&tail(7, 50 * ms, 3), 0);
    d.finish_pending();
    let malformed = d.out.malformed;
    let events = d.out.take_events();
    let times: Vec<(u32, u64, u64)> = events
        .samples
        .iter()
        .map(|s| (s.tid, s.t_ns, s.weight_ns))
        .collect();
    assert_eq!(
        times,
        [
            (7, 5 * ms, 10 * ms),
            (7, 9 * ms, 900 * ms),
            (8, 9 * ms, 50 * ms)
        ]
    );
    assert!(events.samples[..2].iter().all(|s| s.frames == stack(10)));
    assert!(events.samples[2].frames.is_empty());
    assert_eq!(malformed, 1);
}

fn record(kind: Kind) -> Record {
    Record::new(kind, 7, 1_000)
}

/// Feed one event (head record and its frames) stamped `t_ns`.
fn feed_event(d: &mut Decoder, mut head: Record, t_ns: u64, frames: &[(u32, i32)]) {
    head.ts_ns = t_ns;
    d.feed(&head, 0);
    for chunk in frames.chunks(FRAMES_PER_RECORD) {
        let mut f = record(Kind::Frames);
        f.ts_ns = t_ns;
        let mut words = [0u64; 5];
        for (w, &(code, lasti)) in words.iter_mut().zip(chunk) {
            *w = (code as u64) << 32 | lasti as u32 as u64;
        }
        (f.a, f.b, f.c, f.d, f.e) = (words[0], words[1], words[2], words[3], words[4]);
        d.feed(&f, 0);
    }
}

#[test]
fn ten_hours_of_churn_keep_a_bounded_number_of_events() {
    let mut d = Decoder::default();
    let ms = 1_000_000u64;
    let end = 10 * 3600 * 1000 * ms;
    let stack = |line: i32| [(7u32, line), (3, 40), (2, 12), (1, 5)];
    let mut identity = |ip: u64| ip;
    let (mut t, mut i, mut addr, mut max_held) = (0u64, 0u64, 0u64, 0usize);
    let mut leaked = 0u64;
    while t < end {
        // Every 10 ms: a CPU sample at one of 8 instructions on one of 3 lines, a sampled
        // temporary freed at once, a copy; every second, a block that is never freed.
        let mut s = record(Kind::Sample);
        (s.a, s.b, s.c) = (0x1000 + i % 8, 10 * ms, 4);
        feed_event(&mut d, s, t, &stack(10 + (i % 3) as i32));
        addr += 64;
        let mut a = record(Kind::Alloc);
        (a.a, a.b, a.c, a.d) = (addr, 64, 1 << 19, 4);
        feed_event(&mut d, a, t, &stack(20));
        let mut free = record(Kind::Free);
        (free.a, free.ts_ns) = (addr, t + ms);
        d.feed(&free, 0);
        let mut c = record(Kind::Copy);
        (c.a, c.b, c.c) = (4096, 1 << 20, 4);
        feed_event(&mut d, c, t, &stack(30));
        if i % 100 == 0 {
            let mut a = record(Kind::Alloc);
            (a.a, a.b, a.c, a.d) = (1 << 40 | i, 64, 1 << 19, 4);
            feed_event(&mut d, a, t, &stack(40));
            leaked += 1;
        }
        d.out.compact_if_due(&mut identity);
        max_held = max_held.max(d.out.held());
        t += 10 * ms;
        i += 1;
    }
    d.finish_pending();
    let live_leaks = leaked as usize;
    // The never-freed blocks stay one by one (the preload's live set bounds them); all
    // else is bounded by windows x distinct stacks.
    assert!(
        max_held < COMPACT_FROM.max(2 * (live_leaks + 40_000)),
        "{max_held} events held at most, {live_leaks} of them live blocks"
    );
    let events = d.out.take_events();
    let cpu: u64 = events.samples.iter().map(|s| s.weight_ns).sum();
    assert_eq!(cpu, i * 10 * ms, "no CPU time lost");
    let copied: u64 = events.copies.iter().map(|c| c.weight).sum();
    assert_eq!(copied, i << 20, "no copied bytes lost");
    let allocated: u64 = events.allocs.iter().map(|a| a.weight).sum::<u64>()
        + events.alloc_groups.iter().map(|g| g.weight).sum::<u64>();
    assert_eq!(allocated, (i + leaked) << 19, "no allocated bytes lost");
    let live = events
        .allocs
        .iter()
        .filter(|a| a.freed_ns.is_none())
        .count();
    assert_eq!(live, live_leaks, "live blocks kept one by one");
    assert!(events.window_ns > 0 && events.window_ns.is_power_of_two());
}

#[test]
fn samples_and_codes_are_reassembled() {
    let mut d = Decoder::default();
    let code = mlprof_wire::Code {
        id: 3,
        firstlineno: 12,
        filename_kind: 1,
        qualname_kind: 1,
        filename_len: 5,
        qualname_len: 1,
        linetable_len: 2,
        address: 0,
    };
    d.feed(&Record::code(7, 1_000, code), 0);
    let mut bytes = [0u8; DATA_BYTES];
    bytes[..8].copy_from_slice(b"a.pyfxy\0");
    d.feed(&Record::data(&bytes), 0);
    let sample = mlprof_wire::Sample {
        ip: 0xdead,
        weight_ns: 10_000,
        depth: 6,
        ..Default::default()
    };
    d.feed(&Record::sample(7, 1_000, sample), 400);
    let frame = |code_id, lasti| Frame { code_id, lasti };
    let first = [
        frame(3, 4),
        frame(3, -1),
        frame(0, 1),
        frame(0, 2),
        frame(0, 3),
    ];
    d.feed(&Record::frames(7, &first), 0);
    d.feed(&Record::frames(7, &[frame(9, 1)]), 0);
    let c = &d.out.codes[&3];
    assert_eq!(
        (c.filename.as_str(), c.qualname.as_str(), c.firstlineno),
        ("a.pyf", "x", 12)
    );
    assert_eq!(c.linetable, b"y\0");
    let sample = &d.out.samples[0];
    assert_eq!(
        (sample.ip, sample.weight_ns, sample.t_ns),
        (0xdead, 10_000, 600)
    );
    assert_eq!(sample.frames.len(), 6);
    assert_eq!(sample.frames[1], (3, -1));
    assert_eq!(sample.frames[5], (9, 1));
    assert_eq!(d.out.malformed, 0);
}

#[test]
fn timed_waits_are_exact_and_only_the_looks_are_scaled() {
    let mut d = Decoder::default();
    let started = mlprof_wire::ThreadStart {
        tid: 7,
        pthread: 1,
        waiting_cell: 0x7000,
    };
    d.feed(&Record::thread_start(7, 0, started), 0);
    assert_eq!(d.out.waiting_cells.get(&7), Some(&0x7000));
    let timed = |weight_ns, flags| mlprof_wire::Sample {
        ip: 0xbad,
        weight_ns,
        depth: 2,
        flags: sample_flags::WAITED | flags,
        tstate: 0,
        caller: 0,
        fault_share: 0,
    };
    let at = [(3u32, 12i32), (3, 40)];
    // Two timed waits of 300 ms at one line, in one merge window: one sample of 600 ms.
    for t in [1_000_000_000u64, 1_001_000_000] {
        feed_event(&mut d, Record::sample(7, t, timed(300_000_000, 0)), t, &at);
    }
    // A CPU sample that claims to be a look is not believed.
    let cpu = mlprof_wire::Sample {
        ip: 0x10,
        weight_ns: 1_000,
        flags: sample_flags::WAITING,
        ..Default::default()
    };
    feed_event(
        &mut d,
        Record::sample(7, 2_000_000_000, cpu),
        2_000_000_000,
        &[],
    );
    // Corrupt waits: longer than the bound (dropped), longer than the run (clamped).
    let t = 3_000_000_000;
    feed_event(
        &mut d,
        Record::sample(7, t, timed(MAX_WAIT_NS + 1, 0)),
        t,
        &at,
    );
    assert_eq!(d.out.malformed, 2, "the head and its frames record");
    feed_event(
        &mut d,
        Record::sample(7, t, timed(MAX_WAIT_NS, 0)),
        t,
        &[(3, 50)],
    );
    d.finish_pending();
    // The looks saw 900 ms of waiting; the kernel says 1 s blocked, of which 0.6 s were
    // timed (and 3 s of the clamped wait): the looks get what is left, here nothing.
    for t in [500_000_000u64, 4_000_000_000] {
        d.out.push_waiting(CpuSample {
            t_ns: t,
            tid: 7,
            ip: 0,
            weight_ns: 450_000_000,
            flags: sample_flags::WAITING,
            frames: vec![(3, 60)],
            caller: 0,
            fault_ns: 0,
        });
    }
    d.out.clocks.insert(
        7,
        super::super::waits::ThreadClocks {
            blocked_ns: 4_000_000_000,
            ..Default::default()
        },
    );
    let events = d.out.take_events();
    let at_line = |line: i32| -> (u64, u32, usize, u64) {
        let of: Vec<&CpuSample> = events
            .samples
            .iter()
            .filter(|s| s.frames.first() == Some(&(3, line)))
            .collect();
        let w = of.iter().map(|s| s.weight_ns).sum();
        let flags = of.iter().fold(0, |f, s| f | s.flags);
        (
            w,
            flags,
            of.len(),
            of.iter().map(|s| s.ip).max().unwrap_or(0),
        )
    };
    let both = sample_flags::WAITED | sample_flags::WAITING;
    // Each wait spread over the 33.5 ms merge windows it spans (10 each: made to overlap,
    // they do not merge), every piece within the waits.
    let (weight, flags, pieces, ip) = at_line(12);
    assert_eq!((weight, flags, ip), (600_000_000, both, 0), "exact, no ip");
    assert_eq!(pieces, 20);
    for s in events
        .samples
        .iter()
        .filter(|s| s.frames.first() == Some(&(3, 12)))
    {
        assert!(
            (700_000_000..=1_001_000_000).contains(&s.t_ns),
            "{}",
            s.t_ns
        );
    }
    let (weight, flags, pieces, ip) = at_line(50);
    assert_eq!((weight, flags, ip), (3_000_000_000, both, 0), "clamped");
    assert_eq!(pieces, 90, "3 s in 33.5 ms windows");
    // Blocked 4 s, 3.6 s timed: the 0.9 s of looks are scaled down to 0.4 s.
    assert_eq!(at_line(60).0, 400_000_000);
    let cpu = events.samples.iter().find(|s| s.ip == 0x10).unwrap();
    assert_eq!(cpu.flags & sample_flags::WAITING, 0);
}

#[test]
fn huge_frame_counts_are_dropped_not_allocated() {
    let mut d = Decoder::default();
    let mut s = record(Kind::Sample);
    s.c = 0xffff_ffff; // 2^32 - 1 frames: 32 GiB if trusted
    d.feed(&s, 0);
    let mut a = record(Kind::Alloc);
    a.d = 1 << 32 | 0xffff_ffff;
    d.feed(&a, 0);
    let mut c = record(Kind::Copy);
    c.c = u64::MAX;
    d.feed(&c, 0);
    // The frames that follow have no event to belong to.
    d.feed(&record(Kind::Frames), 0);
    d.finish_pending();
    assert!(d.out.samples.is_empty() && d.out.allocs.is_empty() && d.out.copies.is_empty());
    assert_eq!(d.out.malformed, 4);
    // The deepest stack the format allows still decodes.
    let mut s = record(Kind::Sample);
    s.c = MAX_FRAMES as u64;
    d.feed(&s, 0);
    for _ in 0..MAX_FRAMES.div_ceil(FRAMES_PER_RECORD) {
        d.feed(&record(Kind::Frames), 0);
    }
    assert_eq!(d.out.samples.len(), 1);
    assert_eq!(d.out.samples[0].frames.len(), MAX_FRAMES);
}

#[test]
fn huge_code_lengths_are_dropped_not_allocated() {
    let mut d = Decoder::default();
    for (c, len_d) in [
        (0, u64::MAX),
        (u64::MAX, 0),
        (1 << 32, 1 << 40),
        (MAX_BLOB_BYTES as u64 + 1, 0),
    ] {
        let mut code = record(Kind::Code);
        code.a = 1;
        code.c = c;
        code.d = len_d;
        d.feed(&code, 0);
        d.feed(&record(Kind::Data), 0);
    }
    d.finish_pending();
    assert!(d.out.codes.is_empty());
    assert_eq!(d.out.malformed, 8, "each head and its data record");
    // The longest blobs the format allows still decode.
    let mut code = record(Kind::Code);
    code.a = 2;
    code.b = 1 << 32 | 1 << 40;
    code.c = MAX_BLOB_BYTES as u64 | (MAX_BLOB_BYTES as u64) << 32;
    code.d = MAX_BLOB_BYTES as u64;
    d.feed(&code, 0);
    for _ in 0..(3 * MAX_BLOB_BYTES).div_ceil(DATA_BYTES) {
        d.feed(&record(Kind::Data), 0);
    }
    let info = &d.out.codes[&2];
    assert_eq!(info.filename.len(), MAX_BLOB_BYTES);
    assert_eq!(info.linetable.len(), MAX_BLOB_BYTES);
    assert_eq!(d.out.malformed, 8);
}

/// The decoder's allocations so far as (address, free time), shared part first.
fn allocs(events: &Events) -> Vec<(u64, Option<u64>)> {
    events.allocs.iter().map(|a| (a.addr, a.freed_ns)).collect()
}

#[test]
fn shared_events_are_not_copied_and_frees_reach_them() {
    let mut d = Decoder::default();
    let alloc = |d: &mut Decoder, addr: u64, ts: u64| {
        let a = mlprof_wire::Alloc {
            addr,
            size: 64,
            weight: 1000,
            ..Default::default()
        };
        d.feed(&Record::alloc(7, ts, a), 0);
    };
    let free = |d: &mut Decoder, addr: u64, ts: u64| d.feed(&Record::free(7, ts, addr), 0);
    alloc(&mut d, 1, 1);
    alloc(&mut d, 2, 2);
    d.finish_pending();
    let first = d.out.share();
    assert_eq!(allocs(&first), [(1, None), (2, None)]);
    assert!(d.out.allocs.is_empty());
    // While the snapshot holds its share: a free of a shared block, a new block, and a
    // new block at a shared block's address (its free was not seen).
    free(&mut d, 1, 5);
    alloc(&mut d, 3, 6);
    alloc(&mut d, 2, 7);
    d.finish_pending();
    assert_eq!(
        allocs(&first),
        [(1, None), (2, None)],
        "a share never changes"
    );
    let second = d.out.share();
    assert!(
        !Arc::ptr_eq(&first, &second),
        "copied: the first share was still held"
    );
    let expected = [(1, Some(5)), (2, Some(7)), (3, None), (2, None)];
    assert_eq!(allocs(&second), expected);
    let at = Arc::as_ptr(&second);
    drop((first, second));
    free(&mut d, 3, 9);
    let s = mlprof_wire::Sample {
        weight_ns: 1,
        ..Default::default()
    };
    d.feed(&Record::sample(7, 10, s), 0);
    d.finish_pending();
    let third = d.out.share();
    assert_eq!(
        Arc::as_ptr(&third),
        at,
        "added to in place: no share was held"
    );
    assert_eq!(third.samples.len(), 1);
    drop(third);
    free(&mut d, 2, 11);
    let all = d.out.take_events();
    let expected = [(1, Some(5)), (2, Some(7)), (3, Some(9)), (2, Some(11))];
    assert_eq!(allocs(&all), expected);
    assert_eq!(all.samples.len(), 1);
}

#[test]
fn wide_strings_decode() {
    assert_eq!(decode_str(&[0xe9, 0], 2), "é");
    assert_eq!(decode_str(&0x1F600u32.to_le_bytes(), 4), "😀");
    assert_eq!(decode_str(&[0xe9], 1), "é");
}
