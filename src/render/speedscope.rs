//! speedscope's file format (https://www.speedscope.app, "file-format-schema.json"): one shared
//! frame table and a sampled profile per measure (CPU, wall, allocated, held at peak); the
//! export's [`Measure`] is the profile speedscope opens on (`activeProfileIndex`), and is
//! written even when nothing was measured in it.

use serde_json::{json, Value};

use super::Measure;
use crate::error::{Error, Result};
use crate::model::Profile;

/// The speedscope document, opening on `measure`.
pub fn render(p: &Profile, measure: Measure) -> Result<String> {
    let frames: Vec<Value> = p
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
    let measures: Vec<Measure> = [Measure::Cpu, Measure::Wall, Measure::Alloc, Measure::Peak]
        .into_iter()
        .filter(|&m| m == measure || p.stacks.iter().any(|s| m.value(s) > 0))
        .collect();
    let active = measures.iter().position(|&m| m == measure).unwrap_or(0);
    let profiles: Vec<Value> = measures.into_iter().map(|m| profile(p, m)).collect();
    let doc = json!({
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "name": format!("mlprof: {}", p.command.join(" ")),
        "exporter": format!("mlprof {}", env!("CARGO_PKG_VERSION")),
        "activeProfileIndex": active,
        "shared": {"frames": frames},
        "profiles": profiles,
    });
    serde_json::to_string(&doc).map_err(|e| Error::new(format!("speedscope export: {e}")))
}

fn profile(p: &Profile, m: Measure) -> Value {
    let (mut samples, mut weights) = (Vec::new(), Vec::new());
    for s in &p.stacks {
        let v = m.value(s);
        if v > 0 {
            samples.push(s.frames.clone());
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

    /// speedscope opens on the measure asked for, present even when nothing was measured in it.
    #[test]
    fn the_active_profile_is_the_measure() {
        let mut p = Profile {
            schema: SCHEMA.into(),
            ..Profile::default()
        };
        p.stack_frames = vec![StackFrame {
            file: "/a/train.py".into(),
            function: "<module>".into(),
            line: 3,
        }];
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
}
