//! Anonymous mappings outside malloc (issue 15): counted apart from the heap, attributed to
//! the lines holding them at their peak, each process counting its own, on every Python.

use mlprof::model::Profile;

use crate::cpu::{line, markers};
use crate::fixture::{self, within};

const MIB: f64 = (1u64 << 20) as f64;

fn run(py: &fixture::Python, scenario: &str) -> Profile {
    fixture::profile_script(py, "mapped.py", &[scenario], &[]).profile
}

#[test]
fn mappings_are_held_at_their_lines_and_unmapped_ones_are_gone() {
    let m = markers("mapped.py");
    for py in fixture::spread(fixture::pythons()) {
        let v = &py.minor;
        let p = run(py, "lines");
        let peak = p.memory.peak_mapped_bytes as f64;
        assert!(within(peak, 168.0 * MIB, 0.10), "{v}: mapped peak {peak}");
        let held =
            |marker: &str| line(&p, "mapped.py", m[marker]).measures.mapped_peak_bytes as f64 / MIB;
        for (marker, mib) in [("python-mmap", 60.0), ("mmap", 45.0), ("mremap", 63.0)] {
            let got = held(marker);
            assert!(
                within(got, mib, 0.10),
                "{v}: {marker} holds {got} MiB, not {mib}"
            );
        }
        let lines_of = |marker: &str| {
            p.lines
                .iter()
                .filter(|l| l.file.ends_with("mapped.py") && l.line == m[marker])
                .map(|l| l.measures.mapped_peak_bytes)
                .sum::<u64>()
        };
        for marker in ["closed", "unmapped", "reservation"] {
            assert_eq!(
                lines_of(marker),
                0,
                "{v}: {marker} holds nothing at the peak"
            );
        }
        // Mappings are not heap: the heap peak is the interpreter's few MiB.
        assert!(
            (p.memory.peak_heap_bytes as f64) < 40.0 * MIB,
            "{v}: heap {}",
            p.memory.peak_heap_bytes
        );
        let main = &p.processes[0];
        assert!(
            within(main.peak_mapped_bytes as f64, 168.0 * MIB, 0.10),
            "{v}"
        );
    }
}

#[test]
fn a_fork_child_counts_the_mappings_it_makes_not_those_it_inherited() {
    let m = markers("mapped.py");
    for py in fixture::spread(fixture::pythons()) {
        let v = &py.minor;
        let p = run(py, "fork");
        let python: Vec<_> = p.processes.iter().filter(|p| p.python.is_some()).collect();
        assert_eq!(python.len(), 2, "{v}: {:?}", p.processes);
        let (parent, child) = (python[0], python[1]);
        assert!(child.forked, "{v}");
        assert!(
            within(parent.peak_mapped_bytes as f64, 60.0 * MIB, 0.05),
            "{v}"
        );
        assert!(
            within(child.peak_mapped_bytes as f64, 40.0 * MIB, 0.05),
            "{v}"
        );
        assert!(
            within(p.memory.peak_mapped_bytes as f64, 100.0 * MIB, 0.05),
            "{v}"
        );
        let child_line = line(&p, "mapped.py", m["child-map"]);
        assert!(
            within(
                child_line.measures.mapped_peak_bytes as f64,
                40.0 * MIB,
                0.10
            ),
            "{v}: {:?}",
            child_line.measures
        );
    }
}

#[test]
fn what_is_left_of_a_cut_mapping_stays_at_its_line_and_mapped_memory_is_held() {
    let m = markers("mapped.py");
    for py in fixture::spread(fixture::pythons()) {
        let v = &py.minor;
        let json = fixture::tempdir().join("cut.json");
        let script = fixture::script("mapped.py");
        fixture::run_to(
            &json,
            &[
                fixture::os(&py.exe),
                fixture::os(&script),
                fixture::os("cut"),
            ],
            &[],
        );
        let p: &Profile = &serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let at = |marker: &str| {
            let got = p
                .lines
                .iter()
                .filter(|l| l.file.ends_with("mapped.py") && l.line == m[marker])
                .fold((0, 0), |(held, mapped), l| {
                    (
                        held + l.measures.peak_bytes,
                        mapped + l.measures.mapped_peak_bytes,
                    )
                });
            (got.0 as f64 / MIB, got.1 as f64 / MIB)
        };
        // The 32 MiB left of the cut mapping, at the line that mapped it, resident: held.
        let (held, mapped) = at("cut-map");
        assert!(within(mapped, 32.0, 0.10), "{v}: cut-map maps {mapped} MiB");
        assert!(within(held, 32.0, 0.15), "{v}: cut-map holds {held} MiB");
        for marker in ["cut-unmap", "cut-advise"] {
            assert_eq!(at(marker), (0.0, 0.0), "{v}: {marker} holds nothing");
        }
        let (held, mapped) = at("held");
        assert!(within(mapped, 96.0, 0.10), "{v}: held maps {mapped} MiB");
        assert!(within(held, 96.0, 0.15), "{v}: held holds {held} MiB");
        // The peak the lines are taken at is the counted one, mostly mapped memory.
        let counted = p.memory.peak_counted_bytes as f64 / MIB;
        assert!(counted >= 0.9 * 128.0, "{v}: counted peak {counted} MiB");
        assert!(
            p.memory.held_at_s.is_some_and(|t| t > p.memory.peak_at_s),
            "{v}: held at {:?}, heap peak at {}",
            p.memory.held_at_s,
            p.memory.peak_at_s
        );
        // The text report names them among the holders, the largest first, and its "held"
        // column has them at 80 columns (where the mapped column may not fit).
        let text = fixture::read_with("report", &json, &["--width", "80"]);
        let holders = text
            .lines()
            .skip_while(|l| !l.starts_with("Held at the peak"))
            .nth(1)
            .unwrap_or("");
        assert!(
            holders.contains(&format!("mapped.py:{} ", m["held"])),
            "{v}:\n{text}"
        );
        // The "held" column is there, and the @held row has its 96 MiB in it.
        let header = text
            .lines()
            .find(|l| l.trim_start().starts_with("line "))
            .unwrap_or("");
        assert!(header.contains(" held"), "{v}: no held column:\n{text}");
        let row = text
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{} ", m["held"])))
            .unwrap_or("");
        assert!(row.contains("96.0 MiB"), "{v}: {row}\n{text}");
    }
}

#[test]
fn openblas_buffers_are_mapped_not_heap_and_the_heap_stays_below_rss() {
    for py in fixture::spread(fixture::numpy_pythons()) {
        let v = &py.minor;
        let p = run(py, "openblas");
        let mem = &p.memory;
        assert!(
            mem.peak_heap_bytes <= mem.peak_rss_bytes,
            "{v}: heap {} above RSS {}",
            mem.peak_heap_bytes,
            mem.peak_rss_bytes
        );
        for proc in &p.processes {
            assert!(
                proc.peak_heap_bytes <= proc.peak_rss_bytes.max(1),
                "{v}: {proc:?}"
            );
        }
    }
}
