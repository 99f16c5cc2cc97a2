//! What must hold in every profile. Tests check every profile they produce against these;
//! `mlprof report` refuses a profile that breaks them.

use super::profile::{Idle, Profile};

/// Every broken invariant of `p`, as sentences (empty when the profile is consistent).
pub fn violations(p: &Profile) -> Vec<String> {
    let mut out = Vec::new();
    let mut check = |ok: bool, what: String| {
        if !ok {
            out.push(what);
        }
    };
    check(
        p.schema == super::SCHEMA,
        format!("schema is {:?}, expected {:?}", p.schema, super::SCHEMA),
    );
    check(
        p.wall_s.is_finite() && p.wall_s >= 0.0,
        format!("wall_s {} is not a duration", p.wall_s),
    );
    check(
        !(p.exit.code.is_some() && p.exit.signal.is_some()),
        "exit has both a code and a signal".to_string(),
    );
    let m = &p.memory;
    let timeline_heap = m.timeline.iter().map(|s| s.heap_bytes).max().unwrap_or(0);
    check(
        timeline_heap <= m.peak_heap_bytes,
        format!(
            "timeline heap {timeline_heap} exceeds peak_heap_bytes {}",
            m.peak_heap_bytes
        ),
    );
    let timeline_rss = m.timeline.iter().map(|s| s.rss_bytes).max().unwrap_or(0);
    check(
        timeline_rss <= m.peak_rss_bytes,
        format!(
            "timeline RSS {timeline_rss} exceeds peak_rss_bytes {}",
            m.peak_rss_bytes
        ),
    );
    check(
        m.unaccounted_bytes <= m.peak_rss_bytes,
        format!(
            "unaccounted {} exceeds peak RSS {}",
            m.unaccounted_bytes, m.peak_rss_bytes
        ),
    );
    check(
        m.timeline.windows(2).all(|w| w[0].t_s <= w[1].t_s),
        "timeline is not in time order".to_string(),
    );
    for proc in &p.processes {
        check(
            proc.peak_heap_bytes <= m.peak_heap_bytes,
            format!("process {} peak heap exceeds the tree's", proc.pid),
        );
        let devices = proc.gpu_calls.iter().flat_map(|c| &c.devices);
        for d in devices.filter(|d| !d.timeline.is_empty()) {
            let top = d.timeline.iter().map(|s| s.bytes).max().unwrap_or(0);
            let end = d.timeline.last().map_or(0, |s| s.bytes);
            check(
                top == d.peak_bytes
                    && end == d.end_bytes
                    && d.timeline.windows(2).all(|w| w[0].t_s <= w[1].t_s),
                format!(
                    "process {} device {:?}: GPU timeline (highest {top}, last {end}) against \
                     peak {} and end {}, or out of time order",
                    proc.pid, d.device, d.peak_bytes, d.end_bytes
                ),
            );
        }
    }
    let frames = p.stack_frames.len() as u32;
    check(
        p.stacks
            .iter()
            .all(|s| s.frames.iter().all(|&f| f < frames)),
        "a stack refers to a frame that does not exist".to_string(),
    );
    check(
        p.samples
            .iter()
            .all(|s| (s.stack as usize) < p.stacks.len()),
        "a timeline sample refers to a stack that does not exist".to_string(),
    );
    // Lines and threads see the same samples; waiting only as far as `idle` counts it. (A
    // profile without threads has no samples of its own: one made by hand, or merged.)
    let sum = |f: &dyn Fn(&super::profile::Measures) -> f64| -> f64 {
        p.lines.iter().map(|l| f(&l.measures)).sum()
    };
    let cpu_lines = sum(&|m| m.cpu_python_s + m.cpu_native_s + m.kernel_s);
    let cpu_threads: f64 = p
        .threads
        .iter()
        .map(|t| t.cpu_python_s + t.cpu_native_s + t.kernel_s)
        .sum();
    let waiting_lines = sum(&|m| m.waiting_s);
    let waiting_threads: f64 = p.threads.iter().map(|t| t.waiting_s).sum();
    let near = |a: f64, b: f64| (a - b).abs() <= 1e-6 * a.abs().max(b.abs()).max(1.0);
    let sampled = !p.threads.is_empty();
    check(
        !sampled || near(cpu_lines, cpu_threads),
        format!("CPU on lines {cpu_lines} s differs from CPU of threads {cpu_threads} s"),
    );
    check(
        !sampled
            || waiting_lines <= waiting_threads + 1e-6 * waiting_threads.max(1.0)
                && (p.idle != Idle::All || near(waiting_lines, waiting_threads)),
        format!(
            "waiting on lines {waiting_lines} s against {waiting_threads} s of threads (idle {:?})",
            p.idle.as_str()
        ),
    );
    for line in &p.lines {
        let c = &line.measures;
        check(
            c.cpu_python_s >= 0.0
                && c.cpu_native_s >= 0.0
                && c.kernel_s >= 0.0
                && c.waiting_s >= 0.0,
            format!("{}:{} has negative time", line.file, line.line),
        );
        check(
            c.alloc_python_bytes <= c.alloc_bytes,
            format!(
                "{}:{} has more Python bytes than bytes",
                line.file, line.line
            ),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{
        GpuCallPeak, GpuHeldSample, MemorySample, Process, ProcessGpuCalls, SCHEMA,
    };

    fn consistent() -> Profile {
        let mut p = Profile {
            schema: SCHEMA.into(),
            wall_s: 1.0,
            ..Profile::default()
        };
        p.memory.peak_heap_bytes = 100;
        p.memory.peak_rss_bytes = 300;
        p.memory.timeline = vec![
            MemorySample {
                t_s: 0.0,
                heap_bytes: 50,
                rss_bytes: 200,
                ..MemorySample::default()
            },
            MemorySample {
                t_s: 0.5,
                heap_bytes: 100,
                rss_bytes: 300,
                ..MemorySample::default()
            },
        ];
        p.processes = vec![Process {
            pid: 1,
            peak_heap_bytes: 100,
            ..Process::default()
        }];
        p
    }

    #[test]
    fn a_consistent_profile_passes() {
        assert_eq!(violations(&consistent()), Vec::<String>::new());
    }

    #[test]
    fn each_broken_rule_is_named() {
        let mut p = consistent();
        p.memory.timeline[1].heap_bytes = 101;
        p.memory.timeline[0].t_s = 2.0;
        p.processes[0].peak_heap_bytes = 500;
        p.exit.code = Some(0);
        p.exit.signal = Some(9);
        // A GPU timeline whose highest point is not the device's peak.
        let point = |t_s, bytes| GpuHeldSample { t_s, bytes };
        p.processes[0].gpu_calls = Some(ProcessGpuCalls {
            devices: vec![GpuCallPeak {
                peak_bytes: 30,
                end_bytes: 10,
                timeline: vec![point(0.1, 20), point(0.2, 10)],
                ..GpuCallPeak::default()
            }],
            ..ProcessGpuCalls::default()
        });
        let v = violations(&p);
        assert_eq!(v.len(), 5, "{v:?}");
        assert!(v[4].contains("GPU timeline (highest 20, last 10)"), "{v:?}");
    }
}
