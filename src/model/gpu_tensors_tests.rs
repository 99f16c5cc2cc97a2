use super::*;
use crate::recording::gpu_tensors::TraceEvent;

const MIB: u64 = 1 << 20;
const KIB: u64 = 1 << 10;
const SCRIPT: &str = "/home/me/train.py";

fn ev(action: Action, addr: u64, size: u64, stack: Option<u32>) -> TraceEvent {
    TraceEvent {
        action,
        addr,
        size,
        stack,
        t_ns: None,
    }
}

/// Stack 0: line 10 of the script. Stack 1: a library frame inside line 20 of `step`.
/// Before the trace's first event, Y (256 KiB, line 10: live at the end, so its stack is known)
/// and Z (512 KiB, freed in the trace without being allocated there: no stack) were live, and
/// 2 MiB reserved. The trace: +4 MiB segment, A 1 MiB at line 10, B 2 MiB at line 20, B freed,
/// +2 MiB segment, C 3 MiB at line 20 (the peak: Y + Z + A + C), C freed, Z freed, then an
/// allocation of 10 MiB at line 20 fails with 1 MiB free (Y and A live).
fn trace(entries: u64, max_allocated: u64) -> TensorTrace {
    let (a, b, c, y, z) = (0x1000, 0x2000, 0x3000, 0x4000, 0x5000);
    use Action::*;
    TensorTrace {
        pid: 42,
        state: TraceState::Done,
        torch: "2.5.0".into(),
        entries,
        frames: vec![
            (SCRIPT.into(), 10, "<module>".into()),
            (SCRIPT.into(), 20, "step".into()),
            (
                "/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py".into(),
                125,
                "forward".into(),
            ),
        ],
        stacks: vec![vec![0], vec![2, 1, 0]],
        devices: vec![DeviceTrace {
            device: 0,
            events: vec![
                ev(SegmentAlloc, 0x1000, 4 * MIB, None),
                ev(Alloc, a, MIB, Some(0)),
                ev(Alloc, b, 2 * MIB, Some(1)),
                ev(Free, b, 2 * MIB, None),
                ev(SegmentAlloc, 0x9000, 2 * MIB, None),
                ev(Alloc, c, 3 * MIB, Some(1)),
                ev(Free, c, 3 * MIB, None),
                ev(Free, z, 512 * KIB, None),
                ev(Oom, MIB, 10 * MIB, Some(1)),
            ],
            live: vec![(a, MIB, Some(0)), (y, 256 * KIB, Some(0))],
            reserved: 8 * MIB,
            max_allocated: Some(max_allocated),
            max_requested: Some(max_allocated),
            ring: 0,
        }],
        region: false,
    }
}

fn run(t: TensorTrace) -> (ProcessTensors, HashMap<Place, Acc>) {
    let rec = Recording {
        gpu_tensors: vec![t],
        ..Recording::default()
    };
    let mut places = HashMap::new();
    let mut out = add(&rec, &Filter::default(), &[], &mut places);
    (out.remove(&42).unwrap(), places)
}

fn bytes_at(places: &HashMap<Place, Acc>, line: u32) -> u64 {
    places
        .iter()
        .filter(|(p, _)| p.file == SCRIPT && p.line == line)
        .map(|(_, a)| a.gpu_tensor_bytes)
        .sum()
}

#[test]
fn the_blocks_live_at_the_peak_go_to_the_lines_that_allocated_them() {
    let peak = 256 * KIB + 512 * KIB + MIB + 3 * MIB;
    let (p, places) = run(trace(1000, peak));
    assert_eq!((p.state.as_str(), p.note.as_str()), ("on", ""));
    let d = &p.devices[0];
    assert_eq!(d.peak_allocated_bytes, peak);
    // Reserved: 2 MiB before the trace, 6 MiB taken in it.
    assert_eq!(d.reserved_at_peak_bytes, 8 * MIB);
    assert_eq!(d.cache_slack_bytes, 8 * MIB - peak);
    assert_eq!(d.before_trace_bytes, 512 * KIB, "Z: no stack known");
    // Line 10 holds A and Y; line 20 holds C (its library frame passed over); B was freed.
    assert_eq!(bytes_at(&places, 10), MIB + 256 * KIB);
    assert_eq!(bytes_at(&places, 20), 3 * MIB);
    assert_eq!(d.top[0].line, 20);
    assert_eq!((d.top[0].bytes, d.top[0].blocks), (3 * MIB, 1));
    assert_eq!((d.top[1].line, d.top[1].blocks), (10, 2));
    // The failed allocation: asked at line 20, with A and Y (and nothing else known) held.
    let oom = d.oom.as_ref().unwrap();
    assert_eq!(
        (oom.requested_bytes, oom.device_free_bytes),
        (10 * MIB, MIB)
    );
    assert_eq!(oom.allocated_bytes, MIB + 256 * KIB);
    assert_eq!(oom.at.as_ref().unwrap().line, 20);
    assert_eq!(oom.top.len(), 1);
    assert_eq!((oom.top[0].line, oom.top[0].bytes), (10, MIB + 256 * KIB));
}

#[test]
fn a_peak_older_than_the_ring_is_said_and_a_trace_never_read_is_too() {
    // The ring kept 9 events, all it holds, and PyTorch counted a higher peak: it came before.
    let (p, _) = run(trace(9, 64 * MIB));
    assert!(p.note.contains("came before"), "{}", p.note);
    let (p, _) = run(trace(10_000, 64 * MIB));
    assert_eq!(
        p.note, "",
        "a ring not full saw everything since the trace began"
    );
    // The ring holds every action, also those the hook leaves out (`free_requested`): 12 held
    // of 12 is full though 9 were written.
    let mut t = trace(12, 64 * MIB);
    t.devices[0].ring = 12;
    assert!(run(t).0.note.contains("came before"));
    // Full, but PyTorch's own peak is the replayed one: nothing is missing.
    let peak = 256 * KIB + 512 * KIB + MIB + 3 * MIB;
    assert_eq!(run(trace(9, peak)).0.note, "");
    let mut t = trace(9, 0);
    t.state = TraceState::Recording;
    let (p, places) = run(t);
    assert_eq!(p.state, "unread");
    assert!(p.devices.is_empty() && places.is_empty());
    assert!(p.note.contains("exit handlers"), "{}", p.note);
    // The same trace of a process still running (a snapshot's): it is still recording.
    let mut t = trace(9, 0);
    t.state = TraceState::Recording;
    let rec = Recording {
        gpu_tensors: vec![t],
        channels: vec![crate::recording::ChannelSummary {
            pid: 42,
            still_running: true,
            ..Default::default()
        }],
        ..Recording::default()
    };
    let mut places = HashMap::new();
    let p = add(&rec, &Filter::default(), &[], &mut places)
        .remove(&42)
        .unwrap();
    assert_eq!(p.state, "recording");
    assert!(p.devices.is_empty() && places.is_empty());
    assert!(p.note.contains("still running"), "{}", p.note);
}

#[test]
fn a_stack_only_in_libraries_is_outside_profiled_code() {
    let mut t = trace(1000, 0);
    t.stacks[1] = vec![2];
    let (p, places) = run(t);
    let outside: u64 = places
        .iter()
        .filter(|(p, _)| p.file == OUTSIDE)
        .map(|(_, a)| a.gpu_tensor_bytes)
        .sum();
    assert_eq!(outside, 3 * MIB);
    assert_eq!(p.devices[0].top[0].file, OUTSIDE);
}

#[test]
fn a_block_of_a_thread_without_python_is_not_one_from_before_the_trace() {
    // C (the peak's 3 MiB) allocated by a thread without Python: an empty stack. With no Python
    // thread to join (no samples here) it stays on `<native thread>`, never "before the trace".
    let mut t = trace(1000, 0);
    t.stacks.push(Vec::new());
    let empty = (t.stacks.len() - 1) as u32;
    for e in &mut t.devices[0].events {
        if e.size == 3 * MIB && e.action == Action::Alloc {
            e.stack = Some(empty);
        }
    }
    let (p, places) = run(t);
    let d = &p.devices[0];
    assert_eq!(d.before_trace_bytes, 512 * KIB, "Z only");
    assert_eq!(bytes_at(&places, 20), 0);
    let native: u64 = places
        .iter()
        .filter(|(p, _)| p.file == NATIVE_THREAD)
        .map(|(_, a)| a.gpu_tensor_bytes)
        .sum();
    assert_eq!(native, 3 * MIB);
}
