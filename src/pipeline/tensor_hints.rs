//! Hints drawn from the tensors at the GPU peak (PyTorch's allocator trace, `model::gpu_tensors`):
//! a line whose tensors pile up step after step until the peak (something keeps them alive:
//! most often a list of losses holding their autograd graphs), and a device whose allocator
//! held much more than its tensors at the peak (cache slack). Thresholds in
//! `docs/design/hints.md`. Pure.

use crate::model::{Hint, HintKind, Profile};
use crate::units::bytes;

const MIB: u64 = 1 << 20;
/// A growing line holding less than this share of its device's peak, or this much, is no hint.
const GROWING_SHARE: f64 = 0.2;
const GROWING_MIN: u64 = 64 * MIB;
/// Cache slack below this share of what was reserved at the peak, or this much, is no hint.
const SLACK_SHARE: f64 = 0.25;
const SLACK_MIN: u64 = 256 * MIB;

/// The tensor hints of every traced process.
pub fn of(p: &Profile) -> Vec<Hint> {
    let mut out = Vec::new();
    for process in &p.processes {
        let Some(t) = &process.gpu_tensors else {
            continue;
        };
        for d in &t.devices {
            let peak = d.peak_allocated_bytes;
            for l in d.growing.iter().take(1) {
                if l.bytes < GROWING_MIN || (l.bytes as f64) < GROWING_SHARE * peak as f64 {
                    continue;
                }
                let source = p
                    .lines
                    .iter()
                    .find(|s| s.file == l.file && s.line == l.line)
                    .map(|s| s.source.trim().to_string());
                out.push(Hint {
                    kind: HintKind::GpuGrowing,
                    file: Some(l.file.clone()),
                    line: Some(l.line),
                    function: Some(l.function.clone()),
                    source,
                    pid: Some(process.pid),
                    evidence: format!(
                        "its tensors on device {} rose step after step to {} in {} blocks at \
                         the peak ({:.0}% of the device's {})",
                        d.device,
                        bytes(l.bytes),
                        l.blocks,
                        100.0 * l.bytes as f64 / peak.max(1) as f64,
                        bytes(peak)
                    ),
                    suggestion: "something keeps what each step allocated here alive: a list \
                                 collecting a tensor that requires grad keeps its whole \
                                 autograd graph (`losses.append(loss)`: append `loss.item()` or \
                                 `loss.detach()`), as do caches and outputs kept for later; \
                                 drop the references or move what must stay to the CPU"
                        .into(),
                    saving_bytes: Some(l.bytes),
                    saving: format!("up to {} of GPU memory at the peak", bytes(l.bytes)),
                    ..Hint::default()
                });
            }
            let slack = d.cache_slack_bytes;
            let reserved = d.reserved_at_peak_bytes;
            if slack >= SLACK_MIN && slack as f64 >= SLACK_SHARE * reserved as f64 {
                out.push(Hint {
                    kind: HintKind::GpuCacheSlack,
                    pid: Some(process.pid),
                    evidence: format!(
                        "device {}: its allocator held {} reserved but free at the peak of its \
                         tensors ({} allocated of {} reserved)",
                        d.device,
                        bytes(slack),
                        bytes(peak),
                        bytes(reserved)
                    ),
                    suggestion: "PyTorch's caching allocator keeps freed blocks for reuse, and \
                                 blocks of sizes that do not come back stay unused: set \
                                 `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` (segments \
                                 that grow in place), or call `torch.cuda.empty_cache()` after \
                                 a phase whose tensor sizes do not recur"
                        .into(),
                    saving_bytes: Some(slack),
                    saving: format!("up to {} of GPU memory reserved", bytes(slack)),
                    ..Hint::default()
                });
            }
        }
    }
    out
}
