//! speedscope's file format (https://www.speedscope.app, "file-format-schema.json"): one shared
//! frame table and a sampled profile per measure (CPU, wall, allocated, held at peak); the
//! export's [`Measure`] is the profile speedscope opens on (`activeProfileIndex`), and is
//! written even when nothing was measured in it. A stack without frames (the interpreter's
//! start-up and shutdown, a thread without Python) is the frame [`NO_FRAME`], as in the folded
//! and pprof exports: speedscope counts an empty sample in its total and shows it in no frame.

use serde_json::{json, Value};

use super::{Measure, NO_FRAME};
use crate::error::{Error, Result};
use crate::model::Profile;

/// The speedscope document, opening on `measure`.
pub fn render(p: &Profile, measure: Measure) -> Result<String> {
    let mut frames: Vec<Value> = p
        .stack_frames
        .iter()
        .map(|f| {
            if f.line == 0 {
                json!({"name": f.function, "file": f.file})
            } else {
                json!({"name": f.function, "file": f.file, "line": f.line})
            }
        })
        .collect();
    // Its index, after the profile's own frames.
    let no_frame = frames.len();
    if p.stacks.iter().any(|s| s.frames.is_empty()) {
        frames.push(json!({ "name": NO_FRAME }));
    }
    let measures: Vec<Measure> = [Measure::Cpu, Measure::Wall, Measure::Alloc, Measure::Peak]
        .into_iter()
        .filter(|&m| m == measure || p.stacks.iter().any(|s| m.value(s) > 0))
        .collect();
    let active = measures.iter().position(|&m| m == measure).unwrap_or(0);
    let profiles: Vec<Value> = measures
        .into_iter()
        .map(|m| profile(p, m, no_frame))
        .collect();
    let doc = json!({
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "name": format!("mlprof: {}", super::shown_command(&p.command)),
        "exporter": format!("mlprof {}", env!("CARGO_PKG_VERSION")),
        "activeProfileIndex": active,
        "shared": {"frames": frames},
        "profiles": profiles,
    });
    serde_json::to_string(&doc).map_err(|e| Error::new(format!("speedscope export: {e}")))
}

/// One measure's sampled profile; `no_frame`: the frame index of a stack without frames.
fn profile(p: &Profile, m: Measure, no_frame: usize) -> Value {
    let (mut samples, mut weights) = (Vec::new(), Vec::new());
    for s in &p.stacks {
        let v = m.value(s);
        if v > 0 {
            samples.push(if s.frames.is_empty() {
                vec![no_frame as u32]
            } else {
                s.frames.clone()
            });
            weights.push(if m.is_time() {
                v as f64 / 1e6
            } else {
                v as f64
            });
        }
    }
    let total: f64 = weights.iter().sum();
    json!({
        "type": "sampled",
        "name": m.title(),
        "unit": if m.is_time() { "seconds" } else { "bytes" },
        "startValue": 0,
        "endValue": total,
        "samples": samples,
        "weights": weights,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{StackFrame, StackStats, SCHEMA};

    /// A profile whose one frame is `<module>` at `/a/train.py:3`, without stacks.
    fn one_frame() -> Profile {
        Profile {
            schema: SCHEMA.into(),
            stack_frames: vec![StackFrame {
                file: "/a/train.py".into(),
                function: "<module>".into(),
                line: 3,
            }],
            ..Profile::default()
        }
    }

    /// speedscope opens on the measure asked for, present even when nothing was measured in it.
    #[test]
    fn the_active_profile_is_the_measure() {
        let mut p = one_frame();
        p.stacks = vec![StackStats {
            frames: vec![0],
            cpu_python_s: 0.5,
            alloc_bytes: 1024,
            ..StackStats::default()
        }];
        for (measure, want) in [
            (Measure::Cpu, "CPU time"),
            (Measure::Wall, "CPU and waiting time"),
            (Measure::Alloc, "bytes allocated"),
            (Measure::Peak, "bytes held at the heap peak"),
        ] {
            let doc: Value = serde_json::from_str(&render(&p, measure).unwrap()).unwrap();
            let active = doc["activeProfileIndex"].as_u64().unwrap() as usize;
            assert_eq!(doc["profiles"][active]["name"], want, "{measure:?}");
            assert_eq!(doc["shared"]["frames"][0]["name"], "<module>");
        }
    }

    /// A stack without frames is the frame `<no Python frame>`, after the profile's own, in
    /// every measure; without such a stack there is no such frame.
    #[test]
    fn a_stack_without_frames_is_the_no_frame_frame() {
        let mut p = one_frame();
        p.stacks = vec![
            StackStats {
                frames: vec![0],
                cpu_python_s: 0.5,
                ..StackStats::default()
            },
            StackStats {
                frames: vec![],
                cpu_native_s: 0.25,
                alloc_bytes: 4096,
                ..StackStats::default()
            },
        ];
        let doc: Value = serde_json::from_str(&render(&p, Measure::Cpu).unwrap()).unwrap();
        let frames = doc["shared"]["frames"].as_array().unwrap();
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[1]["name"], NO_FRAME);
        for prof in doc["profiles"].as_array().unwrap() {
            let samples = prof["samples"].as_array().unwrap();
            assert!(samples.iter().all(|s| !s.as_array().unwrap().is_empty()));
            assert!(samples.contains(&serde_json::json!([1])), "{prof}");
        }
        let cpu = &doc["profiles"][0];
        assert_eq!(cpu["weights"], serde_json::json!([0.5, 0.25]));

        p.stacks.pop();
        let doc: Value = serde_json::from_str(&render(&p, Measure::Cpu).unwrap()).unwrap();
        assert_eq!(doc["shared"]["frames"].as_array().unwrap().len(), 1);
    }
}
