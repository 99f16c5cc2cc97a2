//! Where a thread without Python (a BLAS, OpenMP, rayon or gloo pool) was working for: the
//! line its process's Python threads were on at that moment. Used for the pool's CPU samples
//! (`cpu`, through [`donors`]), its stacks (`stacks`) and what it allocates, maps and copies
//! (`memory`). Pure.

use std::collections::HashMap;

use mlprof_wire::sample_flags;

use super::places::{Place, INTERPRETER, NATIVE_THREAD, OUTSIDE};
use crate::recording::maps::{code_class, find_mapping, CodeClass, MappedFile};
use crate::recording::{CpuSample, Recording};

/// The Python sample, `(channel, sample)`, whose place a sample takes; None where it keeps
/// the place its own frames gave it.
pub type Donor = Option<(usize, usize)>;

/// Where each CPU and waiting sample of each channel works for, `[channel][sample]`
/// ([`Donor`]), given where each went by its own frames (`cpu::places`):
/// - a thread without Python (a BLAS, OpenMP, rayon or gloo pool: on [`NATIVE_THREAD`]) joins
///   the line its process's Python threads were on at that moment ([`PoolJoin::at`]); with no
///   Python sample close enough on one side it stays there. A wait the Python thread timed
///   itself is never a candidate: its samples in the wait go where the thread was when the
///   wait began (in `bench/workloads/mixed_lines.py` 0.66 s of OpenBLAS spinning through ten
///   0.1 s sleeps belongs to the product before each);
/// - the CPU of a library's own Python threads (no frame of the user's code on their stack:
///   scikit-learn's k-means threads, a prefetching thread) joins the same way; their waiting
///   stays off the lines (`idle`);
/// - a child a Python line started works for that line where it runs none of the user's code:
///   a program without Python (g++), a Python child starting up or running library code only
///   (torch.compile's compile workers), joined to its nearest Python ancestor
///   ([`python_ancestor`]).
///
/// Used for time (`cpu`) and for stacks: a pool's stack is drawn under the Python stack of the
/// line it worked for (`stacks`).
pub fn donors(rec: &Recording, sample_places: &[Vec<Place>]) -> Vec<Vec<Donor>> {
    rec.channels
        .iter()
        .enumerate()
        .map(|(ci, channel)| {
            let own = &sample_places[ci];
            let join =
                PoolJoin::new(&channel.samples, own).with_code(&channel.samples, &channel.maps);
            let mut donor: Vec<Donor> = channel
                .samples
                .iter()
                .zip(own)
                .enumerate()
                .map(|(i, (s, place))| {
                    let pool = place.file == NATIVE_THREAD;
                    let helper = place.file == OUTSIDE
                        && s.tid != channel.pid
                        && s.flags & sample_flags::WAITING == 0;
                    let at = match (pool, helper) {
                        (true, _) => join.at_code(s.t_ns, i),
                        (false, true) => join.at(s.t_ns),
                        (false, false) => None,
                    };
                    at.map(|j| (ci, j))
                })
                .collect();
            if let Some(ai) = python_ancestor(rec, ci) {
                let parent = PoolJoin::new(&rec.channels[ai].samples, &sample_places[ai]);
                for (i, s) in channel.samples.iter().enumerate() {
                    let now = match donor[i] {
                        Some((c, j)) => &sample_places[c][j],
                        None => &own[i],
                    };
                    let outside = [OUTSIDE, INTERPRETER, NATIVE_THREAD]
                        .contains(&now.file.as_str())
                        && s.flags & sample_flags::WAITING == 0;
                    if channel.python.is_none() || outside {
                        if let Some(j) = parent.for_child(s.t_ns, channel.start_ns) {
                            donor[i] = Some((ai, j));
                        }
                    }
                }
            }
            donor
        })
        .collect()
}

/// The places of channel `ci`'s samples after [`donors`]: each its donor's, else its own.
pub fn joined(sample_places: &[Vec<Place>], donors: &[Donor], ci: usize) -> Vec<Place> {
    sample_places[ci]
        .iter()
        .zip(donors)
        .map(|(own, donor)| match *donor {
            Some((c, j)) => sample_places[c][j].clone(),
            None => own.clone(),
        })
        .collect()
}

/// How far apart a native-thread event and Python-thread samples may be to be joined when
/// only one side is known.
const JOIN_WINDOW_NS: u64 = 25_000_000;
/// How far apart the Python-thread samples on both sides of a native-thread event may be when
/// they agree (waiting samples come every collector tick, later on a loaded machine), unless
/// the Python thread ran less than this much CPU between them ([`PoolJoin::at`]).
const BRACKET_WINDOW_NS: u64 = 150_000_000;

/// Slack around a timed wait's interval for [`lasted`] (clocks read on either side of the
/// call, a sample's stamp taken after its stack).
const WAIT_SLACK_NS: u64 = 1_000_000;

/// The time a wait the thread timed itself ([`sample_flags::WAITED`], stamped at the middle of
/// the time it stands for) lasted, with a little slack: (from, to) in ns from launch.
fn lasted(s: &CpuSample) -> (u64, u64) {
    let half = s.weight_ns / 2 + WAIT_SLACK_NS;
    (s.t_ns.saturating_sub(half), s.t_ns.saturating_add(half))
}

/// How long after the last Python sample in native code a pool still works for it while its
/// Python threads only interpret Python ([`PoolJoin::at_code`]): a pool spins on after the
/// call that woke it (OpenBLAS about 0.1 s, OpenMP's `GOMP_SPINCOUNT` about 0.2 s).
const SPIN_AFTER_NS: u64 = 1_000_000_000;

/// What code a CPU sample ran: the interpreter (pure Python), a native library (the start of
/// its executable mapping; 0 for code in no mapped file), or not known (a look from outside).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Code {
    Unknown,
    Interpreter,
    Library(u64),
}

/// The code of sample `s` by the maps of its process: its instruction's mapping, or, in the
/// interpreter's runtime (libc) called from a library, the caller's (`sched_yield` of a
/// spinning OpenBLAS thread is OpenBLAS's).
fn code_of(s: &CpuSample, maps: &[MappedFile]) -> Code {
    if s.flags & (sample_flags::WAITING | sample_flags::WAITED) != 0 || s.ip == 0 {
        return Code::Unknown;
    }
    let native = |addr: u64| {
        find_mapping(maps, addr)
            .filter(|m| code_class(&m.path) == CodeClass::Native)
            .map(|m| m.start)
    };
    match find_mapping(maps, s.ip) {
        None => Code::Library(0),
        Some(m) if code_class(&m.path) == CodeClass::Native => Code::Library(m.start),
        Some(_) => match s.caller {
            0 => Code::Interpreter,
            caller => native(caller).map_or(Code::Interpreter, Code::Library),
        },
    }
}

/// One process's Python-thread samples, by time, and where each was placed.
pub struct PoolJoin<'a> {
    placed: &'a [Place],
    /// The code each sample ran, by sample index (empty: not known, [`PoolJoin::with_code`]).
    code: Vec<Code>,
    /// CPU samples and looks of Python threads: (time, sample, the CPU it stands for).
    python: Vec<(u64, usize, u64)>,
    /// Timed waits of Python threads: (from, to, sample), by start.
    waits: Vec<(u64, u64, usize)>,
    /// Where the wait each piece belongs to began.
    began_at: Vec<u64>,
    longest: u64,
}

impl<'a> PoolJoin<'a> {
    /// From a process's samples and where each was placed by its own frames.
    pub fn new(samples: &[CpuSample], placed: &'a [Place]) -> PoolJoin<'a> {
        let timed = |s: &CpuSample| s.flags & sample_flags::WAITED != 0;
        // Samples with no user frame (a library's own threads) say nothing of the user's line.
        let mut python: Vec<(u64, usize, u64)> = samples
            .iter()
            .enumerate()
            .filter(|&(i, s)| !s.frames.is_empty() && !timed(s) && placed[i].file != OUTSIDE)
            .map(|(i, s)| {
                let cpu = match s.flags & sample_flags::WAITING {
                    0 => s.weight_ns,
                    _ => 0,
                };
                (s.t_ns, i, cpu)
            })
            .collect();
        python.sort_unstable();
        let mut waits: Vec<(u64, u64, usize)> = samples
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.frames.is_empty() && timed(s))
            .map(|(i, s)| {
                let (from, to) = lasted(s);
                (from, to, i)
            })
            .collect();
        waits.sort_unstable();
        let longest = waits
            .iter()
            .map(|&(from, to, _)| to - from)
            .max()
            .unwrap_or(0);
        // Where each wait began: a wait arrives in pieces (one per merge window), and
        // back-to-back pieces of one thread at one stack are one wait.
        let mut began_at = vec![0u64; waits.len()];
        // By thread: (end, sample, start) of its latest wait.
        let mut last: HashMap<u32, (u64, usize, u64)> = HashMap::new();
        for (k, &(from, to, j)) in waits.iter().enumerate() {
            let s = &samples[j];
            began_at[k] = match last.get(&s.tid) {
                Some(&(end, prev, began))
                    if from <= end.saturating_add(WAIT_SLACK_NS)
                        && samples[prev].frames == s.frames =>
                {
                    began
                }
                _ => from,
            };
            last.insert(s.tid, (to, j, began_at[k]));
        }
        PoolJoin {
            placed,
            code: Vec::new(),
            python,
            waits,
            began_at,
            longest,
        }
    }

    /// With the code each of `samples` ran (the samples it was made from), for
    /// [`PoolJoin::at_code`].
    pub fn with_code(mut self, samples: &[CpuSample], maps: &[MappedFile]) -> PoolJoin<'a> {
        self.code = samples.iter().map(|s| code_of(s, maps)).collect();
        self
    }

    /// The Python sample a pool's CPU sample (sample `i`, at `t_ns`) joins: where Python
    /// samples within [`JOIN_WINDOW_NS`] are in the pool's own library, the nearest of those
    /// (the thread whose call the pool serves, of several Python threads: not the main
    /// thread's `join` beside it); where all of those that ran code (not looks from outside)
    /// interpret Python, the last Python sample in native code within [`SPIN_AFTER_NS`]
    /// before (a pool spinning on after a product is not working for the pure-Python line
    /// that follows; a caller waiting at the pool's barrier looks like a thread in `join`);
    /// else as [`PoolJoin::at`].
    pub fn at_code(&self, t_ns: u64, i: usize) -> Option<usize> {
        let Some(&Code::Library(library)) = self.code.get(i) else {
            return self.at(t_ns);
        };
        let python = &self.python;
        let from = python.partition_point(|&(pt, _, _)| pt + JOIN_WINDOW_NS < t_ns);
        let to = python.partition_point(|&(pt, _, _)| pt <= t_ns + JOIN_WINDOW_NS);
        let near = python.get(from..to).unwrap_or_default();
        let same = near
            .iter()
            .filter(|&&(_, j, _)| library != 0 && self.code[j] == Code::Library(library))
            .map(|&(pt, j, _)| (pt.abs_diff(t_ns), j))
            .min();
        if let Some((_, j)) = same {
            return Some(j);
        }
        // Looks from outside (a thread waiting, at a barrier or in `join`) say nothing of the
        // code it is in: only the CPU samples close by are asked.
        let pure = near
            .iter()
            .filter(|&&(_, j, _)| self.code[j] != Code::Unknown)
            .all(|&(_, j, _)| self.code[j] == Code::Interpreter);
        if !near.is_empty() && pure {
            let before = python.partition_point(|&(pt, _, _)| pt <= t_ns);
            let last_native = python[..before]
                .iter()
                .rev()
                .take_while(|&&(pt, _, _)| pt + SPIN_AFTER_NS >= t_ns)
                .find(|&&(_, j, _)| matches!(self.code[j], Code::Library(_)));
            if let Some(&(_, j, _)) = last_native {
                return Some(j);
            }
        }
        self.at(t_ns)
    }

    /// The sample of a wait a Python thread timed itself that `t_ns` falls in, if any (the
    /// latest begun): what a child process does while its parent waits for it (in
    /// `subprocess.run`, a compile pool's `result`) is for the line that waits.
    pub fn waiting_at(&self, t_ns: u64) -> Option<usize> {
        self.waits_over(t_ns).next().map(|k| self.waits[k].2)
    }

    /// The timed waits (indices into `waits`) that `t_ns` falls in, the latest begun first.
    fn waits_over(&self, t_ns: u64) -> impl Iterator<Item = usize> + '_ {
        let waits = &self.waits;
        let began = waits.partition_point(|&(from, _, _)| from <= t_ns);
        (0..began)
            .rev()
            .take_while(move |&k| waits[k].0.saturating_add(self.longest) >= t_ns)
            .filter(move |&k| waits[k].1 >= t_ns)
    }

    /// Where a child's event at `t_ns` joins its Python ancestor (this join), the child
    /// having started at `start_ns`: the wait the ancestor is in then; else its first Python
    /// sample at or after both (within [`BRACKET_WINDOW_NS`]: the ancestor is in the line that
    /// started the child from its start on, and its samples before are of the lines before);
    /// else as [`PoolJoin::at`].
    pub fn for_child(&self, t_ns: u64, start_ns: u64) -> Option<usize> {
        if let Some(j) = self.waiting_at(t_ns) {
            return Some(j);
        }
        let t = t_ns.max(start_ns);
        let python = &self.python;
        let after = python.partition_point(|&(pt, _, _)| pt < t);
        match python.get(after) {
            Some(&(pt, j, _)) if pt <= t + BRACKET_WINDOW_NS => Some(j),
            _ => self.at(t_ns),
        }
    }

    /// The Python sample whose place a pool's event at `t_ns` joins, if any: the line of the
    /// Python samples within [`JOIN_WINDOW_NS`] when they agree, the nearest of them in time
    /// when they do not; with none that close, the line of the samples just before and just
    /// after when they agree (within [`BRACKET_WINDOW_NS`]), else (the Python thread ran
    /// little between them: starved of the CPU, it moved on) the nearer of them. Inside a
    /// wait a Python thread timed itself (a sleep, a poll), as at the wait's start: the pool's
    /// work is what the line before left running, never the wait's.
    pub fn at(&self, t_ns: u64) -> Option<usize> {
        let (python, placed) = (&self.python, self.placed);
        let mut t = t_ns;
        let during = self.waits_over(t).map(|k| self.began_at[k]).min();
        if let Some(from) = during {
            t = from;
        }
        let from = python.partition_point(|&(pt, _, _)| pt + JOIN_WINDOW_NS < t);
        let near = python[from..]
            .iter()
            .take_while(|&&(pt, _, _)| pt <= t + JOIN_WINDOW_NS)
            .map(|&(pt, j, _)| (pt.abs_diff(t), j));
        let mut unique: Option<usize> = None;
        let mut agreed = true;
        let mut nearest: Option<(u64, usize)> = None;
        for (gap, j) in near {
            match unique {
                None => unique = Some(j),
                Some(u) if placed[u] == placed[j] => {}
                Some(_) => agreed = false,
            }
            if nearest.is_none_or(|(g, _)| gap < g) {
                nearest = Some((gap, j));
            }
        }
        if !agreed {
            // The Python thread moved between lines within the window (a training step's
            // forward, backward and optimizer lines, each starting parallel regions): the
            // pool worked for the line nearest in time.
            return nearest.map(|(_, j)| j);
        }
        if unique.is_none() {
            // No Python sample close by: the ones before and after. Far apart in time but
            // with little CPU run between them (the later one stands for what ran since), the
            // Python thread was starved of the CPU, not busy elsewhere (a waiting thread is
            // looked at every tick): on a machine loaded beyond its cores, gaps of 0.8 s
            // left the OpenMP team's work on `<native thread>`. Then the line they agree on,
            // or, where the thread moved on meanwhile, the nearer one in time, however close
            // the two are (a loaded machine leaves gaps wider than the join window between
            // the lines of a training step, as between forward and backward).
            let after = python.partition_point(|&(pt, _, _)| pt < t);
            let before = after.checked_sub(1).map(|k| python[k]);
            let next = python.get(after).copied();
            if let (Some((tb, jb, _)), Some((ta, ja, ran))) = (before, next) {
                let starved = ran <= BRACKET_WINDOW_NS;
                if placed[jb] == placed[ja] && (ta - tb <= BRACKET_WINDOW_NS || starved) {
                    unique = Some(jb);
                } else if starved {
                    unique = Some(if t - tb <= ta - t { jb } else { ja });
                }
            }
        }
        unique
    }
}

/// The image of the nearest ancestor of image `ci` that runs Python: the line it was on is
/// what a child's work outside any user code is done for (the g++ and cc1plus processes of
/// `torch.compile`, its Python compile workers starting up). None for a rank of a distributed
/// job, which is a job of its own.
pub fn python_ancestor(rec: &Recording, ci: usize) -> Option<usize> {
    let me = &rec.channels[ci];
    if me.rank.is_some() {
        return None;
    }
    let mut pid = me.ppid;
    for _ in 0..64 {
        // The newest image of that pid started before this one.
        let parent = rec
            .channels
            .iter()
            .enumerate()
            .filter(|(_, c)| c.pid == pid && c.start_ns <= me.start_ns)
            .max_by_key(|(_, c)| c.start_ns)?;
        if parent.1.python.is_some() {
            return Some(parent.0);
        }
        if parent.1.ppid == pid {
            return None;
        }
        pid = parent.1.ppid;
    }
    None
}
