//! The report's other tables: CPU by function, threads, processes (a program run three times
//! or more folded into one row), ranks and regions. Each lays its columns out by the width
//! (`layout::Table`): its key (function, pid, rank, region) and leading figures first, its
//! text (function name, command, pids) cut to what is left.

use std::collections::{BTreeMap, HashMap};

use super::{exit, pct, short, source_text, total_time, Doc, Tone, MIN_SHARE};
use crate::model::{Idle, Process, Profile, Rank};
use crate::render::layout::{cells, cut, name_and_place, Column, Keep, Layout, Table};
use crate::sanitize::clean;
use crate::units::{bytes, seconds};

/// A table's rows, laid out: each row's prefix, then its text cut to the width (`fit` makes
/// the text of a row for the room it has, when it can do better than cutting its end).
fn emit(
    doc: &mut Doc,
    layout: &Layout,
    rows: &[(Vec<String>, String)],
    fit: impl Fn(usize, usize) -> Option<String>,
) {
    for (i, (row, text)) in rows.iter().enumerate() {
        let prefix = layout.prefix(row);
        let fitted = doc
            .width()
            .filter(|&w| cells(&prefix) + cells(text) > w)
            .and_then(|w| fit(i, w.saturating_sub(cells(&prefix))));
        doc.row(Tone::Plain, &prefix, fitted.as_deref().unwrap_or(text));
    }
}

fn widest(rows: &[(Vec<String>, String)]) -> usize {
    rows.iter().map(|(_, t)| cells(t)).max().unwrap_or(0)
}

fn cells_only(rows: &[(Vec<String>, String)]) -> Vec<Vec<String>> {
    rows.iter().map(|(c, _)| c.clone()).collect()
}

pub(super) fn functions(doc: &mut Doc, p: &Profile) {
    let whole: f64 = p.functions.iter().map(|f| total_time(&f.measures)).sum();
    if whole <= 0.0 {
        return;
    }
    let mut top: Vec<_> = p
        .functions
        .iter()
        .filter(|f| total_time(&f.measures) >= MIN_SHARE * whole)
        .collect();
    top.sort_by(|a, b| total_time(&b.measures).total_cmp(&total_time(&a.measures)));
    top.truncate(20);
    doc.blank();
    doc.line(Tone::Title, "CPU by function");
    let kernel = super::lines::kernel_column(top.iter().map(|f| &f.measures), whole);
    let rows: Vec<(Vec<String>, String)> = top
        .iter()
        .map(|f| {
            let m = &f.measures;
            let mut cells = vec![pct(m.cpu_python_s, whole), pct(m.cpu_native_s, whole)];
            if kernel {
                cells.push(pct(m.kernel_s, whole));
            }
            cells.extend([pct(m.waiting_s, whole), seconds(total_time(m))]);
            let text = format!("{} ({}:{})", clean(&f.function), clean(&f.file), f.line);
            (cells, text)
        })
        .collect();
    let layout = Table {
        indent: 4,
        // The function is the row's key: its name keeps room before the shares do.
        columns: [
            Some(Column::right("Python", 7, Keep::Extra(0))),
            Some(Column::right("native", 7, Keep::Extra(1))),
            kernel.then(|| Column::right("kernel", 7, Keep::Extra(3))),
            Some(Column::right("waiting", 7, Keep::Extra(2))),
            Some(Column::right("time", 9, Keep::Always)),
        ]
        .into_iter()
        .flatten()
        .collect(),
        text: Some("function"),
        gap: 2,
    }
    .layout(&cells_only(&rows), widest(&rows), doc.width());
    doc.line(Tone::Plain, &layout.header());
    // Too wide: the file's directories go first, then the end of the function's name.
    emit(doc, &layout, &rows, |i, room| {
        let f = top[i];
        let place = format!("{}:{}", clean(short(&f.file)), f.line);
        Some(name_and_place(&clean(&f.function), &place, room))
    });
}

pub(super) fn threads(doc: &mut Doc, p: &Profile) {
    if p.threads.len() < 2 {
        return;
    }
    doc.blank();
    doc.line(Tone::Title, &format!("Threads ({})", p.threads.len()));
    let mut sorted: Vec<_> = p.threads.iter().collect();
    sorted.sort_by(|a, b| {
        let t = |x: &&crate::model::ThreadStats| x.time_s();
        t(b).total_cmp(&t(a))
    });
    let kernel = p.threads.iter().any(|t| t.kernel_s >= 0.0005);
    let rows: Vec<Vec<String>> = sorted
        .iter()
        .take(20)
        .map(|t| {
            let mut row = vec![
                t.pid.to_string(),
                t.tid.to_string(),
                if t.python { "Python" } else { "native" }.to_string(),
                seconds(t.cpu_python_s),
                seconds(t.cpu_native_s),
            ];
            if kernel {
                row.push(seconds(t.kernel_s));
            }
            row.push(seconds(t.waiting_s));
            row
        })
        .collect();
    let layout = Table {
        indent: 2,
        columns: vec![
            Column::right("pid", 7, Keep::Always),
            Column::right("tid", 7, Keep::Always),
            Column::right("kind", 7, Keep::Extra(0)),
            Column::right("Python", 9, Keep::Lead(0)),
            Column::right("native", 9, Keep::Lead(1)),
        ]
        .into_iter()
        .chain(kernel.then(|| Column::right("kernel", 9, Keep::Lead(3))))
        .chain([Column::right("waiting", 9, Keep::Lead(2))])
        .collect(),
        text: None,
        gap: 0,
    }
    .layout(&rows, 0, doc.width());
    doc.line(Tone::Plain, &layout.header());
    for row in &rows {
        doc.line(Tone::Plain, &layout.row(row));
    }
    let waited: f64 = p.threads.iter().map(|t| t.waiting_s).sum();
    let on_lines: f64 = p.lines.iter().map(|l| l.measures.waiting_s).sum();
    if p.idle == Idle::All {
        doc.wrap(
            Tone::Plain,
            2,
            "every thread's waiting is counted on its lines (--idle)",
            4,
        );
    } else if p.idle == Idle::Main && waited - on_lines >= 0.01 {
        doc.wrap(
            Tone::Plain,
            2,
            &format!(
                "{} of waiting by threads idle while their main thread ran is listed here \
                 only (--idle counts it on lines)",
                seconds(waited - on_lines)
            ),
            4,
        );
    }
}

/// A merged profile's inputs, then their sum.
pub(super) fn ranks(doc: &mut Doc, p: &Profile) {
    let merged = p.ranks.iter().any(|r| !r.source.is_empty());
    doc.blank();
    doc.line(
        Tone::Title,
        &format!(
            "Ranks ({}{})",
            p.ranks.len(),
            if merged { ", merged" } else { "" }
        ),
    );
    for s in p.stragglers.iter().take(5) {
        let what = if s.waiting { "waits" } else { "spends" };
        let text = format!(
            "{} {what} {} more than the other ranks' median ({}) at {}:{}  {}",
            clean(&s.name),
            seconds(s.excess_s),
            seconds(s.median_s),
            clean(&s.file),
            s.line,
            source_text(&s.source)
        );
        doc.wrap(Tone::Plain, 2, &text, 4);
    }
    for m in p.memory_imbalance.iter().take(3) {
        let text = format!(
            "{} holds {} more at its heap peak than the other ranks' median ({}); {} of it at \
             {}:{}  {}",
            clean(&m.name),
            bytes(m.excess_bytes),
            bytes(m.median_bytes),
            bytes(m.line_excess_bytes),
            clean(&m.file),
            m.line,
            source_text(&m.source)
        );
        doc.wrap(Tone::Plain, 2, &text, 4);
    }
    let rows: Vec<(Vec<String>, String)> = p
        .ranks
        .iter()
        .map(|r| {
            let text = if merged {
                clean(&r.source).into_owned()
            } else {
                let pids: Vec<String> = r.pids.iter().map(|p| p.to_string()).collect();
                pids.join(" ")
            };
            let cells = rank_cells(
                clean(&r.name).into_owned(),
                [r.cpu_python_s, r.cpu_native_s, r.waiting_s],
                r,
            );
            (cells, text)
        })
        .collect();
    let layout = Table {
        indent: 2,
        columns: vec![
            Column::left("rank", 16, Keep::Always),
            Column::right("Python", 8, Keep::Lead(0)),
            Column::right("native", 8, Keep::Lead(1)),
            Column::right("waiting", 8, Keep::Lead(2)),
            Column::right("collective", 10, Keep::Lead(3)),
            Column::right("peak heap", 11, Keep::Extra(0)),
            Column::right("peak RSS", 11, Keep::Extra(2)),
            Column::right("wall", 9, Keep::Extra(1)),
            Column::right("procs", 5, Keep::Extra(4)),
            Column::right("exit", 8, Keep::Extra(3)),
        ],
        text: Some(if merged { "source" } else { "pids" }),
        gap: 2,
    }
    .layout(&cells_only(&rows), widest(&rows), doc.width());
    doc.line(Tone::Plain, &layout.header());
    emit(doc, &layout, &rows, |_, _| None);
    let sum = |f: fn(&Rank) -> f64| p.ranks.iter().map(f).sum::<f64>();
    let total = Rank {
        collective_s: sum(|r| r.collective_s),
        peak_heap_bytes: p.ranks.iter().map(|r| r.peak_heap_bytes).sum(),
        peak_rss_bytes: p.ranks.iter().map(|r| r.peak_rss_bytes).sum(),
        wall_s: p.wall_s,
        processes: p.ranks.iter().map(|r| r.processes).sum(),
        ..Rank::default()
    };
    let mut cells = rank_cells(
        "sum".into(),
        [
            sum(|r| r.cpu_python_s),
            sum(|r| r.cpu_native_s),
            sum(|r| r.waiting_s),
        ],
        &total,
    );
    cells.pop(); // no exit
    doc.line(Tone::Plain, &layout.row(&cells));
}

/// A rank row's cells: name, CPU by kind, then the rank's other figures.
fn rank_cells(name: String, cpu_s: [f64; 3], r: &Rank) -> Vec<String> {
    let mut cells = vec![name];
    cells.extend(cpu_s.map(seconds));
    cells.extend([
        seconds(r.collective_s),
        bytes(r.peak_heap_bytes),
        bytes(r.peak_rss_bytes),
        seconds(r.wall_s),
        r.processes.to_string(),
        exit(&r.exit),
    ]);
    cells
}

pub(super) fn processes(doc: &mut Doc, p: &Profile) {
    doc.blank();
    doc.line(Tone::Title, &format!("Processes ({})", p.processes.len()));
    let ranked = p.processes.iter().any(|q| q.rank.is_some());
    let groups = folded(p);
    let mut rows: Vec<(Vec<String>, String)> = Vec::new();
    for (i, proc) in p.processes.iter().enumerate() {
        match groups.get(&i) {
            Some(Fold::Into) => {}
            Some(Fold::Head(members)) => rows.push(fold_row(p, members)),
            Some(Fold::Launcher(members)) => rows.push(launcher_row(p, members)),
            None => rows.push(process_row(proc)),
        }
    }
    if !ranked {
        for (cells, _) in &mut rows {
            cells.remove(0);
        }
    }
    let mut columns = vec![
        Column::right("pid", 7, Keep::Always),
        Column::right("ppid", 7, Keep::Extra(3)),
        Column::right("python", 8, Keep::Extra(2)),
        Column::right("peak heap", 11, Keep::Lead(0)),
        Column::right("peak RSS", 11, Keep::Extra(1)),
        Column::right("CPU", 9, Keep::Lead(1)),
        Column::right("exit", 10, Keep::Extra(0)),
    ];
    if ranked {
        columns.insert(0, Column::left("rank", 11, Keep::Always));
    }
    let layout = Table {
        indent: 2,
        columns,
        text: Some("command"),
        gap: 2,
    }
    .layout(&cells_only(&rows), widest(&rows), doc.width());
    doc.line(Tone::Plain, &layout.header());
    emit(doc, &layout, &rows, |_, _| None);
}

/// A process's row: its cells (rank first) and its command.
fn process_row(proc: &Process) -> (Vec<String>, String) {
    let command = crate::render::shown_command(&proc.command);
    let command = clean(&command);
    let text = if proc.forked && proc.inherited_heap_bytes > 0 {
        format!(
            "(fork: {} of the peak heap inherited) {command}",
            bytes(proc.inherited_heap_bytes),
        )
    } else if proc.waiting_for_children_s > 0.0 {
        format!(
            "(waited {} for its children) {command}",
            seconds(proc.waiting_for_children_s),
        )
    } else {
        command.into_owned()
    };
    let cells = vec![
        proc.rank
            .as_deref()
            .map_or("-".to_string(), |r| cut(&clean(r), 11).into_owned()),
        proc.pid.to_string(),
        proc.ppid.to_string(),
        clean(proc.python.as_deref().unwrap_or("-")).into_owned(),
        bytes(proc.peak_heap_bytes),
        bytes(proc.peak_rss_bytes),
        seconds(proc.cpu_s),
        if proc.still_running {
            "running".to_string()
        } else {
            exit(&proc.exit)
        },
    ];
    (cells, text)
}

/// Processes of one program folded into one row of the text report.
enum Fold {
    /// The first of the group: the row stands for all these (indices in `processes`).
    Head(Vec<usize>),
    /// The first of the launcher chain: the row stands for all these.
    Launcher(Vec<usize>),
    /// Folded into its group's row.
    Into,
}

/// Programs run three times or more (a compiler's `g++`, `cc1plus`, `as`, `ld` per kernel under
/// torch.compile, a shell's helpers) fold into one row each: by the program's file name, and
/// for Python by its script or `-c`/`-m` argument too. Never the launched process, nor a rank.
fn folded(p: &Profile) -> HashMap<usize, Fold> {
    let root = p.processes.first().map(|q| q.pid);
    let mut out = HashMap::new();
    let launcher = launcher(p);
    if launcher.len() >= 2 {
        for &i in &launcher[1..] {
            out.insert(i, Fold::Into);
        }
        out.insert(launcher[0], Fold::Launcher(launcher));
    }
    let mut by_key: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
    for (i, q) in p.processes.iter().enumerate() {
        if Some(q.pid) == root || q.rank.is_some() || out.contains_key(&i) {
            continue;
        }
        let program = q
            .command
            .first()
            .map(|c| c.rsplit('/').next().unwrap_or(c).to_string())
            .unwrap_or_default();
        let argument = match q.python {
            Some(_) => q.command.get(1).cloned().unwrap_or_default(),
            None => String::new(),
        };
        by_key.entry((program, argument)).or_default().push(i);
    }
    for members in by_key.into_values().filter(|m| m.len() >= 3) {
        for &i in &members[1..] {
            out.insert(i, Fold::Into);
        }
        out.insert(members[0], Fold::Head(members));
    }
    out
}

/// The launcher chain: processes without Python that started before any Python did (a pyenv
/// shim's `bash`, `readlink` and `pyenv`, a wrapper script's helpers), never the launched
/// process itself nor a rank; in `processes` order.
fn launcher(p: &Profile) -> Vec<usize> {
    let root = p.processes.first().map(|q| q.pid);
    let Some(first_python) = p
        .processes
        .iter()
        .filter_map(|q| q.python_start_s)
        .min_by(f64::total_cmp)
    else {
        return Vec::new();
    };
    p.processes
        .iter()
        .enumerate()
        .filter(|(_, q)| {
            Some(q.pid) != root
                && q.rank.is_none()
                && q.python.is_none()
                && !q.still_running
                && q.start_s < first_python
        })
        .map(|(i, _)| i)
        .collect()
}

/// The launcher chain's row: how many processes, their CPU, and the programs by count.
fn launcher_row(p: &Profile, members: &[usize]) -> (Vec<String>, String) {
    let (mut cells, _) = fold_row(p, members);
    let mut programs: BTreeMap<String, usize> = BTreeMap::new();
    for &i in members {
        let q = &p.processes[i];
        let program = q
            .command
            .first()
            .map_or("?", |c| c.rsplit('/').next().unwrap_or(c));
        *programs.entry(clean(program).into_owned()).or_default() += 1;
    }
    let mut programs: Vec<(String, usize)> = programs.into_iter().collect();
    programs.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let names: Vec<String> = programs
        .iter()
        .map(|(name, n)| {
            if *n > 1 {
                format!("{name} x{n}")
            } else {
                name.clone()
            }
        })
        .collect();
    if let Some(python) = cells.get_mut(3) {
        *python = "-".to_string();
    }
    let text = format!(
        "(launcher: {} processes before Python started) {}",
        members.len(),
        names.join(", ")
    );
    (cells, text)
}

fn fold_row(p: &Profile, members: &[usize]) -> (Vec<String>, String) {
    let procs: Vec<&Process> = members.iter().map(|&i| &p.processes[i]).collect();
    let first = procs[0];
    let failed = procs.iter().filter(|q| q.exit.code != Some(0)).count();
    let command = if procs.iter().all(|q| q.command == first.command) {
        clean(&crate::render::shown_command(&first.command)).into_owned()
    } else {
        format!(
            "{} ...",
            clean(first.command.first().map_or("", |c| c.as_str()))
        )
    };
    let cells = vec![
        "-".to_string(),
        format!("x{}", procs.len()),
        "-".to_string(),
        clean(first.python.as_deref().unwrap_or("-")).into_owned(),
        bytes(procs.iter().map(|q| q.peak_heap_bytes).max().unwrap_or(0)),
        bytes(procs.iter().map(|q| q.peak_rss_bytes).max().unwrap_or(0)),
        seconds(procs.iter().map(|q| q.cpu_s).sum()),
        if failed == 0 {
            "0".to_string()
        } else {
            format!("{failed} failed")
        },
    ];
    let text = format!("({} processes, largest peaks) {command}", procs.len());
    (cells, text)
}

/// Regions shown in the text report (the largest peaks); the JSON profile has them all.
const REGIONS_SHOWN: usize = 20;

pub(super) fn regions(doc: &mut Doc, p: &Profile) {
    if p.regions.is_empty() {
        return;
    }
    let mut shown: Vec<_> = p.regions.iter().collect();
    shown.sort_by(|a, b| {
        (b.peak_bytes + b.children_peak_bytes)
            .cmp(&(a.peak_bytes + a.children_peak_bytes))
            .then(a.start_s.total_cmp(&b.start_s))
    });
    let more = shown.len().saturating_sub(REGIONS_SHOWN);
    shown.truncate(REGIONS_SHOWN);
    doc.blank();
    doc.wrap(
        Tone::Title,
        0,
        &format!(
            "Regions ({} marked; peak and net: exact heap above the region's start)",
            p.regions.len()
        ),
        2,
    );
    // A long name takes at most half the width (40 cells).
    let name_cells = doc.width().map_or(40, |w| (w / 2).min(40));
    let rows: Vec<(Vec<String>, String)> = shown
        .iter()
        .map(|r| {
            let top = r.held_at_peak.first().map_or(String::new(), |l| {
                format!("{}:{} {}", clean(short(&l.file)), l.line, bytes(l.bytes))
            });
            let children = if r.children_peak_bytes > 0 {
                format!(" (+{} in children)", bytes(r.children_peak_bytes))
            } else {
                String::new()
            };
            let cells = vec![
                cut(&clean(&r.name), name_cells).into_owned(),
                r.pid.to_string(),
                seconds(r.duration_s),
                bytes(r.peak_bytes),
                signed_bytes(r.end_bytes),
                seconds(r.cpu_python_s),
                seconds(r.cpu_native_s),
                seconds(r.waiting_s),
            ];
            let ended = if r.ended { "" } else { " (did not end)" };
            (cells, format!("{top}{children}{ended}"))
        })
        .collect();
    let layout = Table {
        indent: 2,
        columns: vec![
            Column::left("region", 16, Keep::Always),
            Column::right("pid", 8, Keep::Extra(3)),
            Column::right("time", 9, Keep::Extra(0)),
            Column::right("peak", 11, Keep::Lead(0)),
            Column::right("net", 11, Keep::Lead(1)),
            Column::right("Python", 8, Keep::Extra(1)),
            Column::right("native", 8, Keep::Extra(2)),
            Column::right("waiting", 8, Keep::Extra(4)),
        ],
        text: Some("held most at the peak"),
        gap: 2,
    }
    .layout(&cells_only(&rows), widest(&rows), doc.width());
    doc.line(Tone::Plain, &layout.header());
    for (r, row) in shown.iter().zip(&rows) {
        emit(doc, &layout, std::slice::from_ref(row), |_, _| None);
        // What the region's CUDA calls did, under its row.
        if let Some(gpu) = super::super::gpu_text::line_row(&r.gpu_calls, &[], 0) {
            doc.wrap(Tone::Plain, 4, &gpu, 6);
        }
        if let Some(tensors) = region_tensors(r) {
            doc.wrap(Tone::Plain, 4, &tensors, 6);
        }
    }
    if more > 0 {
        doc.line(
            Tone::Plain,
            &format!("  ... {more} more in the JSON profile (`regions`)"),
        );
    }
}

/// "GPU tensors: 150 MiB at its highest above the 1.0 GiB held at its start; most at
/// t.py:12 100 MiB", or `None` without an allocator trace.
fn region_tensors(r: &crate::model::Region) -> Option<String> {
    if r.gpu_tensor_peak_bytes == 0 && r.gpu_tensor_start_bytes == 0 {
        return None;
    }
    let mut words = format!("GPU tensors: {}", bytes(r.gpu_tensor_peak_bytes));
    if r.gpu_tensor_start_bytes > 0 {
        words += &format!(
            " at its highest above the {} held at its start",
            bytes(r.gpu_tensor_start_bytes)
        );
    } else {
        words += " at its highest";
    }
    if let Some(l) = r.gpu_tensors_at_peak.first() {
        words += &format!(
            "; most at {}:{} {}",
            clean(short(&l.file)),
            l.line,
            bytes(l.bytes)
        );
    }
    Some(words)
}

fn signed_bytes(n: i64) -> String {
    if n < 0 {
        format!("-{}", bytes(n.unsigned_abs()))
    } else {
        bytes(n as u64)
    }
}
