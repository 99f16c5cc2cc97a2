//! Tensors at the GPU peak (docs/design/gpu-tensors.md): each process's CUDA allocator trace
//! replayed per device — blocks allocated and given back, segments taken and returned — to the
//! moment the most bytes of tensors were allocated at once; the blocks live then charged to the
//! lines whose Python stacks allocated them (the innermost frame in a profiled file), the
//! reserved bytes beside them as cache slack, and the same at the last allocation that failed.
//! A block allocated by a thread without Python (an empty stack: PyTorch's autograd engine
//! runs a CUDA backward on a device thread of its own, and the gradients are its) goes to the
//! line its process's Python threads were on then, as that thread's CPU does (`pooljoin`).
//! Pure.

use std::collections::{BTreeMap, HashMap};

use super::filter::Filter;
use super::places::{Acc, Place, NATIVE_THREAD, OUTSIDE};
use super::pooljoin::PoolJoin;
use super::profile::{DeviceTensors, ProcessTensors, TensorLine, TensorOom, GROWTH_POINTS};
use crate::recording::gpu_tensors::{Action, DeviceTrace, TensorTrace, TraceState};
use crate::recording::{CodeInfo, Recording};

/// Lines listed per device (at the peak, at an out-of-memory error).
const TOP: usize = 10;

/// Add every traced process's tensors at its peak to `places`; returns each pid's account.
/// `sample_places`: where each CPU sample went by its own frames (`cpu::places`), for the
/// pool join.
pub fn add(
    rec: &Recording,
    filter: &Filter,
    sample_places: &[Vec<Place>],
    places: &mut HashMap<Place, Acc>,
) -> BTreeMap<u32, ProcessTensors> {
    let mut out = BTreeMap::new();
    for trace in &rec.gpu_tensors {
        let codes = Codes::of(rec, trace.pid);
        // The process's last image (the Python an exec'd launcher became).
        let join = rec
            .channels
            .iter()
            .rposition(|c| c.pid == trace.pid)
            .and_then(|ci| {
                let placed = sample_places.get(ci)?.as_slice();
                Some((PoolJoin::new(&rec.channels[ci].samples, placed), placed))
            });
        let mut resolve = Resolver {
            trace,
            filter,
            codes,
            cache: HashMap::new(),
            join,
        };
        let mut account = match &trace.state {
            TraceState::Done => {
                let devices: Vec<DeviceTensors> = trace
                    .devices
                    .iter()
                    .map(|d| device(d, &mut resolve, places))
                    .collect();
                let note = notes(trace, &devices);
                ProcessTensors {
                    state: "on".into(),
                    note,
                    torch: trace.torch.clone(),
                    devices,
                    cut_to_region: false,
                }
            }
            TraceState::Recording if running(rec, trace.pid) => ProcessTensors {
                state: "recording".into(),
                note: "the process was still running when this report was made: its \
                       allocator's trace is read when it exits, so its tensors are in the \
                       report written then; its GPU memory so far is shown by its CUDA calls' \
                       segments"
                    .into(),
                torch: trace.torch.clone(),
                devices: Vec::new(),
                cut_to_region: false,
            },
            TraceState::Recording => ProcessTensors {
                state: "unread".into(),
                note: "the process ended without running its exit handlers (os._exit, or a \
                       signal), so its allocator's trace was never read: its GPU memory is \
                       shown by its CUDA calls' segments only"
                    .into(),
                torch: trace.torch.clone(),
                devices: Vec::new(),
                cut_to_region: false,
            },
            TraceState::Failed(why) => ProcessTensors {
                state: "failed".into(),
                note: format!("{why}: its GPU memory is shown by its CUDA calls' segments only"),
                torch: trace.torch.clone(),
                devices: Vec::new(),
                cut_to_region: false,
            },
        };
        account.cut_to_region = trace.region;
        out.insert(trace.pid, account);
    }
    out
}

/// Whether process `pid`'s last image was still running when the recording was made (a
/// snapshot's, or one that outlived the command).
fn running(rec: &Recording, pid: u32) -> bool {
    rec.channels
        .iter()
        .rev()
        .find(|c| c.pid == pid)
        .is_some_and(|c| c.still_running)
}

/// What a device's trace says at its peak (its lines added to `places`) and at its last
/// out-of-memory error.
fn device(
    d: &DeviceTrace,
    resolve: &mut Resolver<'_>,
    places: &mut HashMap<Place, Acc>,
) -> DeviceTensors {
    let replay = Replay::new(d);
    let (peak_at, peak_bytes, reserved) = replay.peak();
    let growing = growing(&replay, peak_at, resolve);
    let (by_place, before) = held_by(&replay.live_after(peak_at), resolve);
    for (place, &(bytes, _)) in &by_place {
        let acc = places.entry(place.clone()).or_default();
        acc.gpu_tensor_bytes = acc.gpu_tensor_bytes.saturating_add(bytes);
    }
    let oom = replay.last_oom().map(|(i, requested, free, stack)| {
        let live = replay.live_after(Some(i));
        let (held, _) = held_by(&live, resolve);
        TensorOom {
            requested_bytes: requested,
            at_s: seconds(d.events.get(i).and_then(|e| e.t_ns)),
            device_free_bytes: free,
            allocated_bytes: live.values().fold(0, |a, b| a.saturating_add(b.0)),
            at: stack.map(|s| line(resolve.place_at(s, d.events[i].t_ns), 0, 0)),
            top: top(held),
        }
    });
    DeviceTensors {
        device: d.device,
        peak_allocated_bytes: peak_bytes,
        at_s: seconds(peak_at.and_then(|i| d.events.get(i)).and_then(|e| e.t_ns)),
        reserved_at_peak_bytes: reserved,
        cache_slack_bytes: reserved.saturating_sub(peak_bytes),
        before_trace_bytes: before,
        torch_max_allocated_bytes: d.max_allocated,
        torch_max_requested_bytes: d.max_requested,
        events: d.events.len() as u64,
        top: top(by_place),
        growing,
        oom,
    }
}

/// The lines whose live tensors never fell and rose at least `GROWTH_POINTS / 2` times over
/// [`GROWTH_POINTS`] moments evenly spaced up to the peak, and at least doubled from the
/// moment a third of the way there to the peak (steps that keep what earlier steps made: a
/// list of losses holding their autograd graphs).
fn growing(
    replay: &Replay<'_>,
    peak_at: Option<usize>,
    resolve: &mut Resolver<'_>,
) -> Vec<TensorLine> {
    let Some(peak) = peak_at else {
        return Vec::new();
    };
    let moments: Vec<usize> = (1..=GROWTH_POINTS)
        .map(|k| peak * k / GROWTH_POINTS)
        .collect();
    let mut series: HashMap<Place, Vec<u64>> = HashMap::new();
    let mut blocks: HashMap<Place, u64> = HashMap::new();
    for (k, &at) in moments.iter().enumerate() {
        for &(size, stack, t_ns) in replay.live_after(Some(at)).values() {
            let Some(s) = stack else { continue };
            let place = resolve.place_at(s, t_ns);
            let row = series
                .entry(place.clone())
                .or_insert_with(|| vec![0; GROWTH_POINTS]);
            row[k] = row[k].saturating_add(size);
            if k + 1 == GROWTH_POINTS {
                *blocks.entry(place).or_default() += 1;
            }
        }
    }
    let mut out: HashMap<Place, (u64, u64)> = HashMap::new();
    for (place, row) in series {
        let rises = row.windows(2).filter(|w| w[1] > w[0]).count();
        let falls = row.windows(2).any(|w| w[1] < w[0]);
        let third = row[GROWTH_POINTS / 3];
        let last = row[GROWTH_POINTS - 1];
        if !falls && rises >= GROWTH_POINTS / 2 && last >= third.max(1).saturating_mul(2) {
            let n = blocks.get(&place).copied().unwrap_or(0);
            out.insert(place, (last, n));
        }
    }
    top(out)
}

/// The bytes and blocks of `live` per place, and the bytes of blocks with no stack known.
fn held_by(
    live: &HashMap<u64, Live>,
    resolve: &mut Resolver<'_>,
) -> (HashMap<Place, (u64, u64)>, u64) {
    let mut before = 0u64;
    let mut by_place: HashMap<Place, (u64, u64)> = HashMap::new();
    for &(size, stack, t_ns) in live.values() {
        match stack {
            Some(s) => {
                let e = by_place.entry(resolve.place_at(s, t_ns)).or_default();
                (e.0, e.1) = (e.0.saturating_add(size), e.1 + 1);
            }
            None => before = before.saturating_add(size),
        }
    }
    (by_place, before)
}

fn seconds(ns: Option<u64>) -> Option<f64> {
    ns.map(|ns| ns as f64 / 1e9)
}

fn line(place: Place, bytes: u64, blocks: u64) -> TensorLine {
    TensorLine {
        file: place.file,
        line: place.line,
        function: place.function,
        bytes,
        blocks,
    }
}

fn top(by_place: HashMap<Place, (u64, u64)>) -> Vec<TensorLine> {
    let mut lines: Vec<TensorLine> = by_place
        .into_iter()
        .map(|(place, (bytes, blocks))| line(place, bytes, blocks))
        .collect();
    lines.sort_by(|a, b| (b.bytes, &a.file, a.line).cmp(&(a.bytes, &b.file, b.line)));
    lines.truncate(TOP);
    lines
}

/// Why a process's figures are partial, if they are.
fn notes(trace: &TensorTrace, devices: &[DeviceTensors]) -> String {
    let mut notes = Vec::new();
    for (raw, d) in trace.devices.iter().zip(devices) {
        // Every action counts against the ring, also those the hook does not write.
        let held = if raw.ring > 0 { raw.ring } else { d.events };
        let wrapped = trace.entries > 0 && held >= trace.entries;
        let torch_peak = d.torch_max_requested_bytes.unwrap_or(0);
        // PyTorch's own peak of the same bytes above the replayed one: the peak came before
        // the oldest event the ring kept.
        if wrapped && torch_peak > d.peak_allocated_bytes {
            notes.push(format!(
                "device {}: the allocator's peak ({} bytes by PyTorch's count) came before the \
                 {} events its trace keeps; shown is the highest within them \
                 (MLPROF_GPU_TRACE_ENTRIES keeps more)",
                d.device, torch_peak, trace.entries
            ));
        }
    }
    notes.join("; ")
}

/// A live block: bytes the tensor asked for, its stack, when it was allocated (if known).
type Live = (u64, Option<u32>, Option<u64>);

/// One device's events, replayed from the state before the first: the blocks live then are
/// those live at the end that no event allocated, and those freed that no event allocated.
pub(super) struct Replay<'t> {
    d: &'t DeviceTrace,
    /// Blocks live before the first event: address → (bytes, stack).
    pub(super) start: HashMap<u64, (u64, Option<u32>)>,
    /// Bytes reserved before the first event.
    pub(super) start_reserved: u64,
}

impl<'t> Replay<'t> {
    pub(super) fn new(d: &'t DeviceTrace) -> Replay<'t> {
        let mut allocated: std::collections::HashSet<u64> = Default::default();
        let mut start: HashMap<u64, (u64, Option<u32>)> = HashMap::new();
        let mut reserved_delta: i128 = 0;
        for e in &d.events {
            match e.action {
                Action::Alloc => {
                    allocated.insert(e.addr);
                }
                Action::Free if !allocated.contains(&e.addr) => {
                    start.entry(e.addr).or_insert((e.size, None));
                }
                Action::SegmentAlloc => reserved_delta += i128::from(e.size),
                Action::SegmentFree => reserved_delta -= i128::from(e.size),
                _ => {}
            }
        }
        for &(addr, size, stack) in &d.live {
            if !allocated.contains(&addr) {
                start.entry(addr).or_insert((size, stack));
            }
        }
        let start_reserved = (i128::from(d.reserved) - reserved_delta).max(0) as u64;
        Replay {
            d,
            start,
            start_reserved,
        }
    }

    /// The event after which the most was allocated (`None`: before the first), the bytes
    /// allocated and reserved then.
    fn peak(&self) -> (Option<usize>, u64, u64) {
        let mut live: HashMap<u64, u64> = self.start.iter().map(|(&a, b)| (a, b.0)).collect();
        let mut level: u64 = live.values().fold(0, |a, &b| a.saturating_add(b));
        let mut reserved = self.start_reserved;
        let mut best = (None, level, reserved.max(level));
        for (i, e) in self.d.events.iter().enumerate() {
            match e.action {
                Action::Alloc => {
                    let old = live.insert(e.addr, e.size).unwrap_or(0);
                    level = level.saturating_sub(old).saturating_add(e.size);
                }
                Action::Free => level = level.saturating_sub(live.remove(&e.addr).unwrap_or(0)),
                Action::SegmentAlloc => reserved = reserved.saturating_add(e.size),
                Action::SegmentFree => reserved = reserved.saturating_sub(e.size),
                Action::Oom => {}
            }
            if level > best.1 {
                best = (Some(i), level, reserved.max(level));
            }
        }
        best
    }

    /// The blocks live after event `at` (`None`: before the first).
    fn live_after(&self, at: Option<usize>) -> HashMap<u64, Live> {
        let mut live: HashMap<u64, Live> = self
            .start
            .iter()
            .map(|(&addr, &(size, stack))| (addr, (size, stack, None)))
            .collect();
        let Some(at) = at else { return live };
        for e in self.d.events.iter().take(at + 1) {
            match e.action {
                Action::Alloc => {
                    live.insert(e.addr, (e.size, e.stack, e.t_ns));
                }
                Action::Free => {
                    live.remove(&e.addr);
                }
                _ => {}
            }
        }
        live
    }

    /// The last out-of-memory error: (event index, bytes asked, bytes CUDA had free, stack).
    fn last_oom(&self) -> Option<(usize, u64, u64, Option<u32>)> {
        let (i, e) = self
            .d
            .events
            .iter()
            .enumerate()
            .rev()
            .find(|(_, e)| e.action == Action::Oom)?;
        Some((i, e.size, e.addr, e.stack))
    }
}

/// The code objects a process sent, by file (for the qualified name and first line of a
/// traced frame's function).
struct Codes<'r> {
    by_file: HashMap<&'r str, Vec<&'r CodeInfo>>,
}

impl<'r> Codes<'r> {
    fn of(rec: &'r Recording, pid: u32) -> Codes<'r> {
        let mut by_file: HashMap<&str, Vec<&CodeInfo>> = HashMap::new();
        for c in rec.channels.iter().filter(|c| c.pid == pid) {
            for info in c.codes.values() {
                by_file
                    .entry(info.filename.as_str())
                    .or_default()
                    .push(info);
            }
        }
        Codes { by_file }
    }

    /// The code object of function `name` in `file` that starts last at or before `line`.
    fn find(&self, file: &str, line: u32, name: &str) -> Option<&'r CodeInfo> {
        self.by_file
            .get(file)?
            .iter()
            .filter(|c| {
                (c.qualname == name || c.qualname.rsplit('.').next() == Some(name))
                    && c.firstlineno.max(0) as u32 <= line
            })
            .max_by_key(|c| c.firstlineno)
            .copied()
    }
}

/// Stack → place, as `places::place_of` does for sampled stacks: the innermost frame in a
/// profiled file.
struct Resolver<'a> {
    trace: &'a TensorTrace,
    filter: &'a Filter,
    codes: Codes<'a>,
    cache: HashMap<u32, Place>,
    /// The process's Python threads by time, and where each of their samples went.
    join: Option<(PoolJoin<'a>, &'a [Place])>,
}

impl Resolver<'_> {
    /// The place of a block of stack `stack` allocated at `t_ns`: an empty stack (a thread
    /// without Python) joins the line the Python threads were on then, if one is known.
    fn place_at(&mut self, stack: u32, t_ns: Option<u64>) -> Place {
        let place = self.place(stack);
        if place.file != NATIVE_THREAD {
            return place;
        }
        let joined = self.join.as_ref().and_then(|(join, placed)| {
            let j = join.at(t_ns?)?;
            placed.get(j).cloned()
        });
        joined.unwrap_or(place)
    }

    fn place(&mut self, stack: u32) -> Place {
        if let Some(p) = self.cache.get(&stack) {
            return p.clone();
        }
        // No frame at all: a thread without Python allocated it.
        let pseudo = match self.trace.frames_of(stack).next() {
            None => NATIVE_THREAD,
            Some(_) => OUTSIDE,
        };
        let place = self
            .trace
            .frames_of(stack)
            .find(|(file, _, _)| self.filter.profiles(file))
            .map_or_else(
                || Place {
                    file: pseudo.to_string(),
                    line: 0,
                    function: pseudo.to_string(),
                    first_line: 0,
                },
                |(file, line, name)| match self.codes.find(file, *line, name) {
                    Some(code) => Place {
                        file: file.clone(),
                        line: *line,
                        function: code.qualname.clone(),
                        first_line: code.firstlineno.max(0) as u32,
                    },
                    None => Place {
                        file: file.clone(),
                        line: *line,
                        function: name.clone(),
                        first_line: 0,
                    },
                },
            );
        self.cache.insert(stack, place.clone());
        place
    }
}

#[cfg(test)]
#[path = "gpu_tensors_tests.rs"]
mod tests;
