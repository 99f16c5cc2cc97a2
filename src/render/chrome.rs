//! Chrome's Trace Event format (`chrome://tracing`, Perfetto): counter tracks for the heap,
//! RSS and GPU memory, and for CPU time by kind (Python, native, waiting) per bucket, plus the
//! process names. Counters, not individual samples: the profile keeps CPU time per bucket.

use serde_json::{json, Value};

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
            let name = format!("{} (pid {})", proc.command.join(" "), proc.pid);
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
            "args": {"python": share(c.python_s), "native": share(c.native_s), "waiting": share(c.system_s)}}));
    }
    for g in &p.gpu.timeline {
        events.push(
            json!({"name": "GPU", "ph": "C", "ts": us(g.t_s), "pid": pid, "tid": 0,
            "args": {"util_pct": g.util_pct, "memory_MiB": g.memory_bytes as f64 / 1048576.0}}),
        );
    }
    let doc = json!({"traceEvents": events, "displayTimeUnit": "ms",
        "otherData": {"command": p.command.join(" "), "exporter": format!("mlprof {}", env!("CARGO_PKG_VERSION"))}});
    serde_json::to_string(&doc).map_err(|e| Error::new(format!("chrome trace export: {e}")))
}
