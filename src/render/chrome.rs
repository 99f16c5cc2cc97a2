//! Chrome's Trace Event format (`chrome://tracing`, Perfetto): the CPU samples of the profile's
//! timeline as sample events over a `stackFrames` tree, counter tracks for the heap, RSS and
//! GPU memory and for CPU time by kind (Python, native, waiting) per bucket, and the process
//! names.

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use crate::error::{Error, Result};
use crate::model::Profile;

/// The trace document.
pub fn render(p: &Profile) -> Result<String> {
    let pid = p.processes.first().map_or(1, |proc| proc.pid);
    let us = |s: f64| (s * 1e6).round();
    let mut events: Vec<Value> = p
        .processes
        .iter()
        .map(|proc| {
            let name = format!("{} (pid {})", super::shown_command(&proc.command), proc.pid);
            json!({"name": "process_name", "ph": "M", "ts": 0, "pid": proc.pid, "tid": 0, "args": {"name": name}})
        })
        .collect();
    for m in &p.memory.timeline {
        events.push(json!({"name": "memory", "ph": "C", "ts": us(m.t_s), "pid": pid, "tid": 0,
            "args": {"heap_MiB": m.heap_bytes as f64 / 1048576.0, "rss_MiB": m.rss_bytes as f64 / 1048576.0}}));
    }
    for c in &p.cpu_timeline {
        let share = |s: f64| if c.span_s > 0.0 { s / c.span_s } else { 0.0 };
        events.push(json!({"name": "CPU (cores busy)", "ph": "C", "ts": us(c.t_s), "pid": pid, "tid": 0,
            "args": {"python": share(c.python_s), "native": share(c.native_s), "kernel": share(c.kernel_s), "waiting": share(c.waiting_s)}}));
    }
    for g in &p.gpu.timeline {
        events.push(
            json!({"name": "GPU", "ph": "C", "ts": us(g.t_s), "pid": pid, "tid": 0,
            "args": {"util_pct": g.util_pct, "memory_MiB": g.memory_bytes as f64 / 1048576.0}}),
        );
    }
    let (stack_frames, samples) = sample_events(p);
    let doc = json!({"traceEvents": events, "displayTimeUnit": "ms",
        "stackFrames": stack_frames, "samples": samples,
        "otherData": {"command": super::shown_command(&p.command), "exporter": format!("mlprof {}", env!("CARGO_PKG_VERSION"))}});
    serde_json::to_string(&doc).map_err(|e| Error::new(format!("chrome trace export: {e}")))
}

/// The timeline's samples, and the frame tree they point into: one node per (parent, frame).
fn sample_events(p: &Profile) -> (Map<String, Value>, Vec<Value>) {
    let mut nodes: HashMap<(u64, u32), u64> = HashMap::new();
    let mut frames = Map::new();
    let mut leaf_of_stack: HashMap<u32, u64> = HashMap::new();
    let mut samples = Vec::new();
    for s in &p.samples {
        let leaf = *leaf_of_stack.entry(s.stack).or_insert_with(|| {
            let mut parent = 0u64;
            for &f in &p.stacks[s.stack as usize].frames {
                let next = nodes.len() as u64 + 1;
                let id = *nodes.entry((parent, f)).or_insert(next);
                if id == next {
                    let frame = &p.stack_frames[f as usize];
                    let name = if frame.line == 0 {
                        format!("{} ({})", frame.function, frame.file)
                    } else {
                        format!("{} ({}:{})", frame.function, frame.file, frame.line)
                    };
                    let mut node = json!({"category": if frame.line == 0 { "native" } else { "python" }, "name": name});
                    if parent != 0 {
                        node["parent"] = json!(parent.to_string());
                    }
                    frames.insert(id.to_string(), node);
                }
                parent = id;
            }
            parent
        });
        if leaf == 0 {
            continue; // a stack without frames: nothing to point at
        }
        samples.push(
            json!({"cpu": 0, "tid": s.tid, "pid": s.pid, "ts": (s.t_s * 1e6).round(),
            "name": "cpu", "sf": leaf.to_string(), "weight": s.cpu_s}),
        );
    }
    (frames, samples)
}
