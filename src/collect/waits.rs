//! Off-CPU ("system / waiting") samples, taken from outside the target at every collector
//! tick: a Python thread that the kernel shows sleeping (`S`) or in uninterruptible wait (`D`)
//! is waiting — on sleep, I/O, a lock or the GIL — and the tick's wall time goes to the line
//! it is waiting on. Its stack is read with `process_vm_readv` (a sleeping thread's frames do
//! not move), with the same walker the preload library uses.
//!
//! A thread in a wait it times itself (sleep, poll, select, epoll: `preload/src/hooks/wait.rs`)
//! is not looked at: its "waiting since" word, whose address came with its thread-start record,
//! is set, and the exact sample it sends when the wait returns stands for that time instead.
//! Its stack is still read once per wait ([`OpenWait`]), for a wait still going on when the
//! process ends, which sends nothing.

use std::collections::HashMap;

use mlprof_pyframes::code::{self, Blob};
use mlprof_pyframes::{layouts, walk, Interpreter, Memory};
use mlprof_wire::sample_flags;

use super::channels::TICK_NS;
use super::decode::decode_str;
use super::events::Decoded;
use super::procfs_files;
use super::remote::Remote;
use crate::recording::{CodeInfo, CpuSample, QUEUED_SLOT_NS};

/// Most (slot, thread) run-queue delays kept per channel (`Decoded::queued`, about 8 MB):
/// 2 hours of 36 threads starved all along. Past it, later delays are not kept, and busy
/// threads are told by their CPU alone, as on a quiet machine.
const MAX_QUEUED: usize = 1 << 18;

/// The longest a process whose looks find every Python thread in a wait it times itself, one
/// a look saw already (a `time.sleep`, an idle event loop's `epoll`), goes without a look
/// (ns): each such look doubles the gap from one tick up to this, and a look that finds a
/// Python thread running, or waiting where it does not time its wait, brings it back to
/// every tick. An idle `time.sleep` was looked at every tick, 60 us each, a quarter of the
/// collector's CPU. A wait that begins within the gap is found at the next look, its sample
/// weighing the time since the last look, scaled with the others to the thread's blocked
/// time less its timed waits at the end ([`sample`]).
/// (Backing off from running threads too left a DDP rank's 20 ms waits in the all-reduce
/// below the straggler rule's noise.)
pub const MAX_LOOK_GAP_NS: u64 = 160_000_000;

/// The gap before a process's next look, after a look that `found` a thread that a next look
/// may find waiting anew, or not (`gap_ns` before it): every tick again once one is found,
/// else doubling from a tick.
pub fn next_look_gap(gap_ns: u64, found: bool) -> u64 {
    match found {
        true => 0,
        false => gap_ns.saturating_mul(2).clamp(TICK_NS, MAX_LOOK_GAP_NS),
    }
}

/// Deepest stack read for a waiting thread.
const MAX_DEPTH: usize = 128;
/// Most threads of one interpreter looked at.
const MAX_THREADS: usize = 512;
/// Longest name or line table read.
const MAX_BYTES: usize = 16 * 1024;
/// First id the collector gives to code objects it reads itself (the preload's are below).
const OWN_IDS: u32 = 0x8000_0000;

/// What is needed to sample one process's waiting threads.
pub struct Target<'a> {
    /// Process id.
    pub pid: u32,
    /// Its CPython version (`3.11.7`).
    pub python: &'a str,
    /// Address of `_PyRuntime` in it.
    pub runtime: usize,
    /// Address of `PyCode_Type` in it.
    pub code_type: usize,
    /// When the command was launched (CLOCK_MONOTONIC ns, the clock of the target's timed
    /// waits).
    pub launch_ns: u64,
}

/// A timed wait a look found in progress ([`Decoded::open_waits`]): kept until its own sample
/// arrives or a look finds it over; counted at the end of the run if neither happened (a
/// thread still waiting when its process ended).
#[derive(Clone, Debug, Default)]
pub struct OpenWait {
    /// When it began (ns from launch).
    pub since_ns: u64,
    /// When a look last found the thread in it (ns from launch).
    pub seen_ns: u64,
    /// The thread's stack then.
    pub frames: Vec<(u32, i32)>,
}

/// A thread's clocks at the collector's last look at it.
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadClocks {
    /// When the first look was (ns from launch): `blocked_ns` counts from there.
    pub first_ns: u64,
    /// When (ns from launch).
    pub at_ns: u64,
    /// Nanoseconds it had run.
    pub ran_ns: u64,
    /// Nanoseconds it had waited for a CPU.
    pub queued_ns: u64,
    /// Nanoseconds it was blocked (neither running nor waiting for a CPU) between the first
    /// look and the last.
    pub blocked_ns: u64,
}

/// A thread: (kernel tid, state letter, `schedstat` clocks: ns run, ns waited for a CPU).
type Task = (u32, char, Option<(u64, u64)>);

/// Most threads of a process whose `stat` and `schedstat` files are kept open between looks
/// (`procfs_files`: a reading is one `pread`, not an open, a read and a close); a process with
/// more is read with files opened for the look, so that the kept files stay within their cap.
const KEEP_THREADS: usize = 16;

/// Every thread of `pid`: (kernel tid, state letter of `/proc/PID/task/TID/stat`, its clocks
/// from `schedstat`: nanoseconds run and waited for a CPU, when the kernel keeps them).
fn tasks(pid: u32) -> Vec<Task> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let tids: Vec<u32> = tasks
        .flatten()
        .filter_map(|t| t.file_name().to_str()?.parse::<u32>().ok())
        .collect();
    let keep = tids.len() <= KEEP_THREADS;
    // Files kept for threads that have ended since are closed.
    procfs_files::forget_threads(pid, &tids);
    let read = |path: &str| match keep {
        true => procfs_files::read(path),
        false => procfs_files::read_once(path),
    };
    tids.iter()
        .filter_map(|&tid| {
            let stat = read(&format!("/proc/{pid}/task/{tid}/stat")).unwrap_or_default();
            let state = stat
                .rfind(')')
                .and_then(|i| stat[i + 1..].trim_start().chars().next())?;
            let sched = read(&format!("/proc/{pid}/task/{tid}/schedstat")).and_then(|s| {
                let mut f = s.split_whitespace().map(|v| v.parse::<u64>().ok());
                Some((f.next()??, f.next()??))
            });
            Some((tid, state, sched))
        })
        .collect()
}

/// Add one waiting sample (of `weight_ns`, the time since the previous look) per waiting
/// Python thread of `target` to `out`, and, with the kernel's per-thread clocks (`schedstat`),
/// add to each thread's exact blocked time: the time between looks less what it ran and waited
/// for a CPU. Looks tend to come when a CPU frees up, which is when a thread blocks, so the
/// intervals overstate its waiting; [`super::events::Decoded::take_events`] scales each
/// thread's waiting samples down to its blocked time (less its timed waits: a look after a
/// gap, [`MAX_LOOK_GAP_NS`], weighs the time since the last look, a timed wait in it
/// included). Whether it found a
/// Python thread running, or waiting other than in a timed wait already seen (the next look
/// may find something to sample), or the threads could not be told apart.
pub fn sample(target: &Target<'_>, weight_ns: u64, now_ns: u64, out: &mut Decoded) -> bool {
    let all = tasks(target.pid);
    for &(tid, _, sched) in &all {
        let Some((ran, queued)) = sched else { continue };
        let clocks = out.clocks.entry(tid).or_insert(ThreadClocks {
            first_ns: now_ns,
            at_ns: now_ns,
            ran_ns: ran,
            queued_ns: queued,
            blocked_ns: 0,
        });
        let wall = now_ns.saturating_sub(clocks.at_ns);
        let waited_for_cpu = queued.saturating_sub(clocks.queued_ns);
        let slot = now_ns - now_ns % QUEUED_SLOT_NS;
        if waited_for_cpu > 0
            && (out.queued.len() < MAX_QUEUED || out.queued.contains_key(&(slot, tid)))
        {
            *out.queued.entry((slot, tid)).or_default() += waited_for_cpu;
        }
        let busy = ran.saturating_sub(clocks.ran_ns) + waited_for_cpu;
        clocks.blocked_ns += wall.saturating_sub(busy);
        (clocks.at_ns, clocks.ran_ns, clocks.queued_ns) = (now_ns, ran, queued);
    }
    let waiting: Vec<u32> = all
        .iter()
        .filter(|&&(_, state, _)| matches!(state, 'S' | 'D'))
        .map(|&(tid, _, _)| tid)
        .collect();
    if waiting.is_empty() {
        return true; // all running
    }
    let mem = Remote::new(target.pid);
    // The layout its preload library walks with: the same function over the same memory.
    let Ok((layout, _)) = super::interpreter::layout(&mem, target.python, target.runtime) else {
        return true;
    };
    let layout = &layout;
    let interp = Interpreter {
        layout,
        code_type: target.code_type,
    };
    let mut states = vec![(0usize, 0usize, None); MAX_THREADS];
    let n = walk::threads(&mem, layout, target.runtime, &mut states);
    let by_pthread: HashMap<u64, u32> = out
        .threads
        .iter()
        .map(|&(tid, pthread)| (pthread, tid))
        .collect();
    let mut frames = [walk::Frame::default(); MAX_DEPTH];
    let mut found = false;
    for &(tstate, pthread, native_tid) in &states[..n] {
        // The thread's own announcement first: after a fork, CPython (3.11 at least) keeps
        // the parent's `native_thread_id` in the surviving thread state.
        let own = native_tid.filter(|t| all.iter().any(|&(tid, _, _)| tid == *t));
        let Some(tid) = by_pthread.get(&(pthread as u64)).copied().or(own) else {
            continue;
        };
        // When the timed wait it is in began (ns from launch), if it is in one.
        let since_ns = timed_wait_since(&mem, out, tid)
            .filter(|_| waiting.contains(&tid))
            .map(|since| since.saturating_sub(target.launch_ns));
        if since_ns.is_none() {
            out.open_waits.remove(&tid); // any timed wait it was in is over
        }
        if !waiting.contains(&tid) {
            found = true; // running: it may wait anywhere next
            continue;
        }
        if let (Some(since_ns), Some(open)) = (since_ns, out.open_waits.get_mut(&tid)) {
            if open.since_ns == since_ns {
                open.seen_ns = now_ns; // seen already: its stack has not moved
                continue;
            }
        }
        let w = walk::walk_ends(
            &mem,
            &interp,
            tstate,
            &mut frames,
            walk::OUTER_FRAMES,
            walk::WALK_LIMIT,
        );
        if w.depth == 0 {
            continue; // between Python frames (start-up, a thread not yet running code)
        }
        found = true;
        let frames: Vec<(u32, i32)> = frames[..w.depth]
            .iter()
            .map(|f| (code_id(&mem, layout, f.code, out), f.lasti))
            .collect();
        if let Some(since_ns) = since_ns {
            // The thread times this wait itself: no look, but where it is, in case the
            // process ends before the wait does.
            let open = OpenWait {
                since_ns,
                seen_ns: now_ns,
                frames,
            };
            out.open_waits.insert(tid, open);
            continue;
        }
        out.push_waiting(CpuSample {
            t_ns: now_ns,
            tid,
            ip: 0,
            weight_ns,
            flags: sample_flags::WAITING,
            frames,
            caller: 0,
            fault_ns: 0,
        });
    }
    found
}

/// When thread `tid` entered the wait it times itself (CLOCK_MONOTONIC ns, its "waiting
/// since" word), or `None` when it is in none.
fn timed_wait_since(mem: &Remote, out: &Decoded, tid: u32) -> Option<u64> {
    let &cell = out.waiting_cells.get(&tid)?;
    let mut word = [0u8; 8];
    mem.read_uncached(cell as usize, &mut word).ok()?;
    Some(u64::from_ne_bytes(word)).filter(|&since| since != 0)
}

/// The id of the code object at `addr`: the preload's if it sent this object, else one of our
/// own after reading it.
pub(super) fn code_id(
    mem: &Remote,
    layout: &layouts::Layout,
    addr: usize,
    out: &mut Decoded,
) -> u32 {
    let (firstlineno, _) = code::identity(mem, layout, addr);
    if let Some(&id) = out.by_address.get(&(addr as u64)) {
        if out
            .codes
            .get(&id)
            .is_some_and(|c| c.firstlineno == firstlineno)
        {
            return id;
        }
    }
    let facts = code::describe(mem, layout, addr, MAX_BYTES);
    let info = CodeInfo {
        firstlineno: facts.firstlineno,
        filename: decode_str(&copy(mem, facts.filename), facts.filename.kind),
        qualname: decode_str(&copy(mem, facts.qualname), facts.qualname.kind),
        linetable: copy(mem, facts.linetable),
        filename_kind: facts.filename.kind,
        qualname_kind: facts.qualname.kind,
        address: addr as u64,
    };
    let id = OWN_IDS + out.own_codes;
    out.own_codes += 1;
    out.codes.insert(id, info);
    out.by_address.insert(addr as u64, id);
    id
}

fn copy(mem: &Remote, blob: Blob) -> Vec<u8> {
    let mut buf = vec![0u8; blob.len];
    match mem.bytes(blob.addr, &mut buf) {
        Some(()) => buf,
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn looks_that_find_nothing_space_out_and_one_that_finds_a_wait_brings_them_back() {
        let mut gap = 0;
        let mut gaps = Vec::new();
        for _ in 0..6 {
            gap = next_look_gap(gap, false);
            gaps.push(gap / 1_000_000);
        }
        assert_eq!(gaps, [20, 40, 80, 160, 160, 160]);
        assert_eq!(next_look_gap(gap, true), 0, "every tick again");
        assert_eq!(next_look_gap(0, false), TICK_NS);
    }
}
