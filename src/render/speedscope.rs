//! speedscope's file format (https://www.speedscope.app, "file-format-schema.json"): one shared
//! frame table and a sampled profile per measure (CPU, wall, allocated, held at peak).

use serde_json::{json, Value};

use super::Measure;
use crate::error::{Error, Result};
use crate::model::Profile;

/// The speedscope document.
pub fn render(p: &Profile) -> Result<String> {
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
    let profiles: Vec<Value> = [Measure::Cpu, Measure::Wall, Measure::Alloc, Measure::Peak]
        .into_iter()
        .filter_map(|m| profile(p, m))
        .collect();
    let doc = json!({
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "name": format!("mlprof: {}", p.command.join(" ")),
        "exporter": format!("mlprof {}", env!("CARGO_PKG_VERSION")),
        "activeProfileIndex": 0,
        "shared": {"frames": frames},
        "profiles": profiles,
    });
    serde_json::to_string(&doc).map_err(|e| Error::new(format!("speedscope export: {e}")))
}

fn profile(p: &Profile, m: Measure) -> Option<Value> {
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
    if samples.is_empty() {
        return None;
    }
    let total: f64 = weights.iter().sum();
    Some(json!({
        "type": "sampled",
        "name": m.title(),
        "unit": if m.is_time() { "seconds" } else { "bytes" },
        "startValue": 0,
        "endValue": total,
        "samples": samples,
        "weights": weights,
    }))
}
