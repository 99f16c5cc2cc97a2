//! The HTML report: one self-contained page (inline CSS, JS and SVG; no network) from tera
//! templates compiled into the binary, with autoescaping on. The profile is embedded as JSON
//! in which `<`, `>` and `&` are written as `\u003c`, `\u003e`, `\u0026`, so no string from the
//! profiled program can close the script element; the page's script renders it with
//! `textContent` only.

use tera::{Context, Tera};

use crate::error::{Error, Result};
use crate::model::Profile;
use crate::units::{bytes, seconds};

const BASE: &str = include_str!("../../templates/base.html");
const REPORT: &str = include_str!("../../templates/report.html");
const SCRIPT: &str = include_str!("../../templates/report.js");

/// Render the page.
pub fn render(p: &Profile) -> Result<String> {
    let mut tera = Tera::default();
    tera.autoescape_on(vec![".html"]);
    tera.add_raw_templates(vec![("base.html", BASE), ("report.html", REPORT)])
        .map_err(|e| Error::new(format!("HTML templates: {e}")))?;
    let mut ctx = Context::new();
    ctx.insert("command", &super::shown_command(&p.command));
    ctx.insert("cards", &cards(p));
    ctx.insert("warnings", &p.warnings);
    ctx.insert("hints", &hints(p));
    ctx.insert(
        "footer",
        &format!(
            "mlprof {} · profile schema {}",
            env!("CARGO_PKG_VERSION"),
            p.schema
        ),
    );
    ctx.insert("profile_json", &embedded_json(p)?);
    ctx.insert("script", SCRIPT);
    tera.render("report.html", &ctx)
        .map_err(|e| Error::new(format!("HTML report: {e}")))
}

/// The hints as the page lists them: (place, evidence, suggestion and saving).
fn hints(p: &Profile) -> Vec<(String, String, String)> {
    p.hints
        .iter()
        .map(|h| {
            let place = match (&h.file, h.line, h.pid) {
                (Some(file), Some(line), _) => format!(
                    "{}:{line}  {}",
                    file.rsplit('/').next().unwrap_or(file),
                    h.source.as_deref().unwrap_or("")
                ),
                (_, _, Some(pid)) => format!("pid {pid}"),
                _ => String::new(),
            };
            (
                place,
                h.evidence.clone(),
                format!("{}; saving: {}", h.suggestion, h.saving),
            )
        })
        .collect()
}

/// Above this many ranks the page's flame graphs are the job's, not each process's: stacks
/// of all processes with the same frames are one (the JSON keeps them apart).
const RANKS_WITH_OWN_STACKS: usize = 8;

/// Timeline samples the page of a many-rank profile carries.
const PAGE_SAMPLES: usize = 5_000;

/// Stacks with the same frames added together, as one process's (pid 0), and where each old
/// stack went.
fn fold_stacks(stacks: Vec<crate::model::StackStats>) -> (Vec<crate::model::StackStats>, Vec<u32>) {
    let mut out: Vec<crate::model::StackStats> = Vec::new();
    let mut by_frames: std::collections::HashMap<Vec<u32>, u32> = Default::default();
    let mut index = Vec::with_capacity(stacks.len());
    for s in stacks {
        let i = *by_frames.entry(s.frames.clone()).or_insert_with(|| {
            out.push(crate::model::StackStats {
                frames: s.frames.clone(),
                ..Default::default()
            });
            (out.len() - 1) as u32
        });
        let into = &mut out[i as usize];
        into.cpu_python_s += s.cpu_python_s;
        into.cpu_native_s += s.cpu_native_s;
        into.waiting_s += s.waiting_s;
        into.kernel_s += s.kernel_s;
        into.alloc_bytes += s.alloc_bytes;
        into.peak_bytes += s.peak_bytes;
        index.push(i);
    }
    (out, index)
}

/// Lines of each rank the page carries.
const RANK_LINES_SHOWN: usize = 25;

/// The profile as JSON that is safe inside a `<script>` element.
fn embedded_json(p: &Profile) -> Result<String> {
    // The page shows each rank's top lines (its chooser), not all of them: a job of many
    // ranks stays a light page.
    let light;
    let many = p.ranks.len() > RANKS_WITH_OWN_STACKS;
    let p = if many || p.ranks.iter().any(|r| r.lines.len() > RANK_LINES_SHOWN) {
        let mut copy = p.clone();
        for r in &mut copy.ranks {
            r.lines.truncate(RANK_LINES_SHOWN);
        }
        if many {
            let (stacks, index) = fold_stacks(std::mem::take(&mut copy.stacks));
            copy.stacks = stacks;
            let samples = std::mem::take(&mut copy.samples)
                .into_iter()
                .filter_map(|s| {
                    Some(crate::model::TimedSample {
                        stack: *index.get(s.stack as usize)?,
                        pid: 0,
                        ..s
                    })
                })
                .collect();
            copy.samples = crate::model::stacks::thin(samples, PAGE_SAMPLES);
        }
        light = copy;
        &light
    } else {
        p
    };
    let json = serde_json::to_string(p)
        .map_err(|e| Error::new(format!("serialising the profile: {e}")))?;
    Ok(json
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026"))
}

fn cards(p: &Profile) -> Vec<(String, String)> {
    let m = &p.memory;
    let exit = match (p.exit.code, p.exit.signal) {
        (Some(c), _) => c.to_string(),
        (None, Some(s)) => format!("signal {s}"),
        (None, None) => "unknown".to_string(),
    };
    let gpu = if p.gpu.available {
        format!(
            "{}, {:.0}% busy",
            bytes(p.gpu.peak_memory_bytes),
            p.gpu.average_util_pct
        )
    } else {
        format!(
            "not available ({})",
            p.gpu.reason.as_deref().unwrap_or("unknown reason")
        )
    };
    let exit = if p.attached {
        "(attached; it ran on)".to_string()
    } else {
        exit
    };
    vec![
        ("exit".into(), exit),
        ("wall time".into(), seconds(p.wall_s)),
        ("CPU time".into(), seconds(p.cpu_s())),
        (
            "peak heap".into(),
            if p.attached {
                "not measured (attached)".to_string()
            } else {
                format!("{} at {}", bytes(m.peak_heap_bytes), seconds(m.peak_at_s))
            },
        ),
        ("peak RSS".into(), bytes(m.peak_rss_bytes)),
        ("RSS not in heap".into(), bytes(m.unaccounted_bytes)),
        (
            "peak mapped (apart from the heap)".into(),
            bytes(m.peak_mapped_bytes),
        ),
        ("processes".into(), p.processes.len().to_string()),
        ("GPU".into(), gpu),
        ("dropped events".into(), p.dropped_events.to_string()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{LineStats, SCHEMA};

    #[test]
    fn program_strings_are_escaped_everywhere() {
        let evil = "</script><script>alert(1)</script>";
        let mut p = Profile {
            schema: SCHEMA.into(),
            command: vec![evil.into()],
            ..Profile::default()
        };
        p.warnings.push(evil.into());
        p.lines.push(LineStats {
            file: evil.into(),
            source: evil.into(),
            function: evil.into(),
            ..LineStats::default()
        });
        let page = render(&p).unwrap();
        assert_eq!(
            page.matches("<script").count(),
            2,
            "only our two script elements"
        );
        assert!(!page.contains("alert(1)</script>"));
        assert!(
            page.contains("&lt;&#x2F;script&gt;") || page.contains("&lt;/script&gt;"),
            "escaped in text"
        );
        assert!(
            page.contains("\\u003c/script\\u003e"),
            "escaped in the embedded JSON"
        );
    }
}
