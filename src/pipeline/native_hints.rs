//! Hints from what a line's native time was (`model::native_kind`): copies made element by
//! element, and thread pools spinning at barriers instead of working. Pure; thresholds in
//! `docs/design/hints.md`.

use super::hints::at;
use crate::model::{Hint, HintKind, LineStats, Profile};
use crate::units::seconds;

/// A line's element-wise copying makes a hint from this share of the run's time...
const COPY_SHARE: f64 = 0.10;
/// ...and this much time.
const COPY_MIN_S: f64 = 0.1;

/// A line spending a tenth of the run or more copying arrays element by element.
pub(super) fn element_copies(l: &LineStats, whole_s: f64) -> Option<Hint> {
    let m = &l.measures;
    if m.copy_loop_s < COPY_MIN_S || m.copy_loop_s < COPY_SHARE * whole_s {
        return None;
    }
    let mut h = at(HintKind::ElementCopies, l);
    h.evidence = format!(
        "{} ({:.0}% of the run) copying arrays element by element in numpy's strided and \
         cast loops: a transposed or strided view made contiguous, a dtype cast or a gather \
         (these bytes are not in `copied`)",
        seconds(m.copy_loop_s),
        100.0 * m.copy_loop_s / whole_s
    );
    h.suggestion = "make arrays in the layout and dtype they are used in (`order=`, `dtype=` \
                    where they are created), cast or reorder once outside the loop, or pass \
                    the view itself where the consumer accepts strides"
        .into();
    h.saving_s = Some(m.copy_loop_s);
    h.saving = format!("up to {} of copying", seconds(m.copy_loop_s));
    Some(h)
}

/// A line's pools' spinning and barrier waiting makes a hint from this share of its native
/// time...
const SPIN_SHARE: f64 = 0.25;
/// ...and this share of the run's time...
const SPIN_RUN_SHARE: f64 = 0.05;
/// ...and this much time (OpenBLAS's threads spinning as `import numpy` starts them: 20 ms).
const SPIN_MIN_S: f64 = 0.1;

/// Whether a line's pools spun enough for the hint: a quarter of its native time, 5 % of the
/// run and 0.1 s.
fn spins(l: &LineStats, whole_s: f64) -> bool {
    let m = &l.measures;
    m.cpu_spin_s >= SPIN_MIN_S
        && m.cpu_spin_s >= SPIN_SHARE * m.cpu_native_s
        && m.cpu_spin_s >= SPIN_RUN_SHARE * whole_s
}

/// The line whose thread pools spent the most time spinning or waiting at barriers, when it
/// was a quarter or more of its native time: more threads than the CPUs left for them
/// (DataLoader workers, other ranks, other processes) or regions too small to share out. One
/// hint for the run (the cause is the run's), naming the other lines that spun as much.
pub(super) fn spin(p: &Profile, lines: &[&LineStats], whole_s: f64) -> Option<Hint> {
    let spinning: Vec<&LineStats> = lines
        .iter()
        .copied()
        .filter(|l| spins(l, whole_s))
        .collect();
    let l = *spinning
        .iter()
        .max_by(|a, b| a.measures.cpu_spin_s.total_cmp(&b.measures.cpu_spin_s))?;
    let m = &l.measures;
    let total: f64 = spinning.iter().map(|l| l.measures.cpu_spin_s).sum();
    // Busy threads over the processes that ran: each process's own busiest moment, summed.
    let busy: u32 = p.processes.iter().map(|q| q.peak_busy_threads).sum();
    let busy_processes = p
        .processes
        .iter()
        .filter(|q| q.peak_busy_threads > 0)
        .count();
    let mut h = at(HintKind::Spin, l);
    h.evidence = format!(
        "its thread pools spent {} ({:.0}% of its native time) spinning and waiting at \
         barriers instead of working",
        seconds(m.cpu_spin_s),
        100.0 * m.cpu_spin_s / m.cpu_native_s.max(f64::MIN_POSITIVE)
    );
    if spinning.len() > 1 {
        h.evidence += &format!("; {} over {} lines", seconds(total), spinning.len());
    }
    h.suggestion = if p.cpus > 0 && busy > p.cpus {
        format!(
            "its processes ran up to {busy} busy threads ({busy_processes} processes, each at \
             its busiest) on {} CPUs: give each pool at most its share of the CPUs \
             (OMP_NUM_THREADS, `torch.set_num_threads`, threadpoolctl), counting DataLoader \
             workers and other processes that compute at the same time",
            p.cpus
        )
    } else {
        "the pool's threads wait for each other: fewer threads (OMP_NUM_THREADS, \
         `torch.set_num_threads`), larger parallel regions, or `OMP_WAIT_POLICY=passive` \
         where other work could use the CPUs"
            .into()
    };
    h.saving_s = Some(total);
    h.saving = format!("up to {} of CPU", seconds(total));
    Some(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Measures;

    fn line(native_s: f64, spin_s: f64, copy_loop_s: f64) -> LineStats {
        LineStats {
            file: "/w/train.py".into(),
            line: 7,
            source: "loss.backward()".into(),
            measures: Measures {
                cpu_native_s: native_s,
                cpu_spin_s: spin_s,
                copy_loop_s,
                ..Measures::default()
            },
            ..LineStats::default()
        }
    }

    #[test]
    fn element_copies_need_a_tenth_of_the_run() {
        assert!(element_copies(&line(2.0, 0.0, 1.0), 4.0).is_some());
        assert!(element_copies(&line(2.0, 0.0, 0.3), 4.0).is_none());
        assert!(
            element_copies(&line(0.05, 0.0, 0.05), 0.2).is_none(),
            "too little time"
        );
    }

    #[test]
    fn spin_needs_a_quarter_of_the_native_time_and_names_the_oversubscription() {
        let mut p = Profile {
            cpus: 2,
            ..Profile::default()
        };
        for busy in [3, 2] {
            p.processes.push(crate::model::Process {
                peak_busy_threads: busy,
                ..Default::default()
            });
        }
        let (half, quarter) = (line(4.0, 2.0, 0.0), line(4.0, 1.0, 0.0));
        let h = spin(&p, &[&quarter, &half], 8.0).expect("half its native time spinning");
        assert!(
            h.suggestion
                .starts_with("its processes ran up to 5 busy threads (2 processes"),
            "{h:?}"
        );
        assert!(h.evidence.contains("(50% of its native time)"), "{h:?}");
        assert!(h.evidence.ends_with("; 3.00 s over 2 lines"), "{h:?}");
        assert_eq!(h.saving_s, Some(3.0));
        assert!(
            spin(&p, &[&line(4.0, 0.5, 0.0)], 8.0).is_none(),
            "an eighth of it"
        );
        assert!(
            spin(&p, &[&line(0.2, 0.2, 0.0)], 100.0).is_none(),
            "a sliver of the run"
        );
        assert!(
            spin(&p, &[&line(0.02, 0.02, 0.0)], 0.1).is_none(),
            "too little time"
        );
        p.processes.truncate(1);
        p.processes[0].peak_busy_threads = 2;
        let h = spin(&p, &[&line(4.0, 2.0, 0.0)], 8.0).unwrap();
        assert!(h.suggestion.starts_with("the pool's threads wait"), "{h:?}");
    }
}
