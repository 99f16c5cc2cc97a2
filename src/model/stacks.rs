//! Whole stacks, for flame graphs and exports: every CPU, waiting and allocation sample's
//! Python frames (outermost first, all files, not only profiled ones, the import machinery
//! folded away), with the native function it was in as the leaf for native CPU time. A thread
//! without Python (or a child process) that worked for a line stands under the Python stack of
//! that line, below a [`POOL`] (or [`CHILD`]) frame, as the line table charges it
//! (`pooljoin::donors`). Aggregated per distinct stack; the heaviest [`MAX_STACKS`] are kept.
//! Pure.

use std::collections::HashMap;

use mlprof_wire::sample_flags;

use super::places::Lines;
use super::pooljoin::Donor;
use super::profile::{StackFrame, StackStats, TimedSample};
use crate::recording::Recording;
use crate::symbolize::NativeNames;

/// Most distinct stacks kept in a profile.
pub const MAX_STACKS: usize = 20_000;
/// Most samples kept on the timeline.
pub const MAX_SAMPLES: usize = 20_000;

/// A CPU sample before its stack index is known: (ns from launch, pid, tid, stack key, seconds).
type Timed = (u64, u32, u32, (u32, Vec<u32>), f64);

#[derive(Default)]
struct Table {
    frames: Vec<StackFrame>,
    index: HashMap<StackFrame, u32>,
    stacks: HashMap<(u32, Vec<u32>), StackStats>,
    pid: u32,
    /// The key of the last stack touched (for the sample timeline).
    last: (u32, Vec<u32>),
    /// Frames the next stacks go under: the Python stack a pool thread worked for, then the
    /// [`POOL`] or [`CHILD`] frame (empty for a sample's own stack).
    under: Vec<u32>,
}

/// The frame between the Python stack a thread without Python worked for and the thread's own
/// frames (`pooljoin::donors`): where the line table charges its time.
pub const POOL: &str = "<pool thread>";
/// The same for a child process working for its nearest Python ancestor's line.
pub const CHILD: &str = "<child process>";

impl Table {
    /// Set [`Table::under`] for a sample of channel `ci` joined to Python sample `donor`
    /// (`lines`: the donor's channel's), remembered in `memo`.
    fn go_under(
        &mut self,
        rec: &Recording,
        donor: Donor,
        ci: usize,
        lines: &mut Lines<'_>,
        memo: &mut HashMap<(usize, usize), Vec<u32>>,
    ) {
        self.under.clear();
        let Some((c, j)) = donor else {
            return;
        };
        if let Some(ids) = memo.get(&(c, j)) {
            self.under.extend_from_slice(ids);
            return;
        }
        let frames = &rec.channels[c].samples[j].frames;
        let mut ids = Vec::with_capacity(frames.len() + 1);
        self.push_python(lines, frames, &mut ids);
        let hop = if c == ci { POOL } else { CHILD };
        ids.push(self.frame(StackFrame {
            file: hop.into(),
            function: hop.into(),
            line: 0,
        }));
        self.under.clone_from(&ids);
        memo.insert((c, j), ids);
    }

    /// Push the ids of `frames` (innermost first), outermost first, leaving out the import
    /// machinery's and mlprof's own start-up hook's.
    fn push_python(&mut self, lines: &mut Lines<'_>, frames: &[(u32, i32)], ids: &mut Vec<u32>) {
        for &(code, lasti) in frames.iter().rev() {
            if let Some((info, line)) = lines.line(code, lasti) {
                if !is_import_machinery(&info.filename) {
                    let f = StackFrame {
                        file: info.filename.clone(),
                        function: info.qualname.clone(),
                        line,
                    };
                    ids.push(self.frame(f));
                }
            }
        }
    }

    fn frame(&mut self, f: StackFrame) -> u32 {
        if let Some(&i) = self.index.get(&f) {
            return i;
        }
        let i = self.frames.len() as u32;
        self.frames.push(f.clone());
        self.index.insert(f, i);
        i
    }

    fn stack(
        &mut self,
        lines: &mut Lines<'_>,
        frames: &[(u32, i32)],
        leaf: Option<StackFrame>,
    ) -> &mut StackStats {
        let under = std::mem::take(&mut self.under);
        let mut ids: Vec<u32> = Vec::with_capacity(under.len() + frames.len() + 1);
        ids.extend_from_slice(&under);
        self.under = under;
        self.push_python(lines, frames, &mut ids);
        if let Some(leaf) = leaf {
            ids.push(self.frame(leaf));
        }
        self.last = (self.pid, ids.clone());
        self.stacks.entry((self.pid, ids)).or_default()
    }
}

/// Frames of CPython's import system (`<frozen importlib._bootstrap>` and
/// `_bootstrap_external`), left out of stacks as tracebacks leave them out: an `import` line
/// then calls the imported module's code directly, instead of through 10-30 frames no user
/// wrote. Their time stays where it was (on the importing line).
fn is_import_machinery(file: &str) -> bool {
    file.starts_with("<frozen importlib._bootstrap") || super::filter::is_mlprof_hook(file)
}

/// The stacks of a recording: (frame table, stacks referring to it, CPU samples on the
/// timeline referring to the stacks).
pub fn build(
    rec: &Recording,
    natives: &NativeNames,
    counted: &[Vec<u64>],
    donors: &[Vec<Donor>],
) -> (Vec<StackFrame>, Vec<StackStats>, Vec<TimedSample>) {
    let mut t = Table::default();
    let mut timed: Vec<Timed> = Vec::new();
    for (ci, channel) in rec.channels.iter().enumerate() {
        let mut lines = Lines::new(rec, ci);
        t.pid = channel.pid;
        let mut memo = HashMap::new();
        // The lines of the ancestor whose Python samples a child's joined (at most one).
        let mut ancestor: Option<(usize, Lines<'_>)> = None;
        for ((s, &weight), &donor) in channel.samples.iter().zip(&counted[ci]).zip(&donors[ci]) {
            match donor {
                Some((c, _)) if c != ci => {
                    let theirs = match &mut ancestor {
                        Some((a, l)) if *a == c => l,
                        slot => &mut slot.insert((c, Lines::new(rec, c))).1,
                    };
                    t.go_under(rec, donor, ci, theirs, &mut memo);
                }
                _ => t.go_under(rec, donor, ci, &mut lines, &mut memo),
            }
            let secs = weight as f64 / 1e9;
            if s.flags & (sample_flags::WAITING | sample_flags::GPU_WAIT) != 0 {
                if weight > 0 {
                    t.stack(&mut lines, &s.frames, None).waiting_s += secs;
                }
                continue;
            }
            let faults = s.fault_ns.min(weight);
            let secs = (weight - faults) as f64 / 1e9;
            if faults > 0 {
                t.stack(&mut lines, &s.frames, None).kernel_s += faults as f64 / 1e9;
            }
            match natives.get(&(ci, s.ip)) {
                named if super::cpu::python_time(s, channel.pid, named, &channel.maps) => {
                    t.stack(&mut lines, &s.frames, None).cpu_python_s += secs;
                }
                named => {
                    let leaf = StackFrame {
                        file: named.map_or_else(|| "?".into(), |r| r.library.clone()),
                        function: named.map_or_else(|| format!("{:#x}", s.ip), |r| r.name()),
                        line: 0,
                    };
                    t.stack(&mut lines, &s.frames, Some(leaf)).cpu_native_s += secs;
                }
            }
            timed.push((
                s.t_ns,
                channel.pid,
                s.tid,
                std::mem::take(&mut t.last),
                secs,
            ));
        }
        t.under.clear();
        let peak_ns = channel.peak_marks.last().map(|&(t, _)| t);
        for a in &channel.allocs {
            let stack = t.stack(&mut lines, &a.frames, None);
            stack.alloc_bytes += a.weight;
            if peak_ns.is_some_and(|p| a.t_ns <= p && a.freed_ns.is_none_or(|f| f > p)) {
                stack.peak_bytes += a.weight;
            }
        }
        for g in &channel.alloc_groups {
            let stack = t.stack(&mut lines, &g.frames, None);
            stack.alloc_bytes += g.weight;
            if g.peak_marks == channel.peak_marks.len() {
                stack.peak_bytes += g.held_at_peak;
            }
        }
    }
    let mut stacks: Vec<StackStats> = t
        .stacks
        .into_iter()
        .map(|((pid, frames), mut s)| {
            (s.pid, s.frames) = (pid, frames);
            s
        })
        .collect();
    let weight = |s: &StackStats| {
        s.cpu_python_s + s.cpu_native_s + s.kernel_s + s.waiting_s + s.alloc_bytes as f64 * 1e-9
    };
    stacks.sort_by(|a, b| {
        weight(b)
            .total_cmp(&weight(a))
            .then_with(|| a.frames.cmp(&b.frames))
    });
    stacks.truncate(MAX_STACKS);
    let samples = timeline(&stacks, timed);
    (t.frames, stacks, samples)
}

/// Samples in time order, thinned evenly to at most `max` (each kept one standing for the CPU
/// of those skipped with it): for merged profiles, whose inputs each kept up to
/// [`MAX_SAMPLES`].
pub fn thin(mut samples: Vec<TimedSample>, max: usize) -> Vec<TimedSample> {
    samples.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
    let step = samples.len().div_ceil(max.max(1)).max(1);
    if step == 1 {
        return samples;
    }
    samples
        .chunks(step)
        .map(|chunk| TimedSample {
            cpu_s: chunk.iter().map(|c| c.cpu_s).sum(),
            ..chunk[0]
        })
        .collect()
}

/// CPU samples in time order, thinned evenly to [`MAX_SAMPLES`] (each kept one standing for
/// those skipped), referring to kept stacks only.
fn timeline(stacks: &[StackStats], mut timed: Vec<Timed>) -> Vec<TimedSample> {
    let index: HashMap<(u32, &[u32]), u32> = stacks
        .iter()
        .enumerate()
        .map(|(i, s)| ((s.pid, s.frames.as_slice()), i as u32))
        .collect();
    timed.sort_by_key(|t| t.0);
    let step = timed.len().div_ceil(MAX_SAMPLES).max(1);
    timed
        .chunks(step)
        .filter_map(|chunk| {
            let (t_ns, pid, tid, key, _) = &chunk[0];
            let stack = *index.get(&(key.0, key.1.as_slice()))?;
            let cpu_s = chunk.iter().map(|c| c.4).sum();
            Some(TimedSample {
                t_s: *t_ns as f64 / 1e9,
                pid: *pid,
                tid: *tid,
                stack,
                cpu_s,
            })
        })
        .collect()
}
