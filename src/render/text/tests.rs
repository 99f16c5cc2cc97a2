use super::*;
use crate::model::{Leak, LineStats, NativeFrame, Process, ThreadStats, SCHEMA};
use crate::render::layout::cells;

/// A profile with every section, by hand (no timings from a real run).
fn sample() -> Profile {
    let mut p = Profile {
        schema: SCHEMA.into(),
        wall_s: 2.5,
        cpu_user_s: 2.0,
        cpu_kernel_s: 0.25,
        ..Profile::default()
    };
    p.command = vec!["python3".into(), "train.py".into()];
    p.exit.code = Some(0);
    p.memory.peak_heap_bytes = 420 << 20;
    p.memory.peak_rss_bytes = 450 << 20;
    p.memory.unaccounted_bytes = 30 << 20;
    p.memory.peak_at_s = 1.5;
    p.gpu.reason = Some("libnvidia-ml.so.1 not found".into());
    p.cpu_samples = 200;
    let line = |n: u32, src: &str, py: f64, nat: f64, sys: f64| {
        LineStats {
            file: "/work/train.py".into(),
            line: n,
            function: "main".into(),
            source: src.into(),
            ..LineStats::default()
        }
        .with_cpu(py, nat, sys)
    };
    let mut matmul = line(
        12,
        "y = x @ w  # a long comment that a narrow terminal cuts off",
        0.0,
        1.2,
        0.0,
    );
    matmul.measures.native = vec![NativeFrame {
        symbol: "dgemm_kernel_HASWELL".into(),
        library: "libopenblas.so".into(),
        cpu_s: 1.1,
    }];
    let mut leak = line(20, "cache.append(np.ones(1 << 20))", 0.1, 0.1, 0.0);
    leak.measures.alloc_bytes = 300 << 20;
    leak.measures.peak_bytes = 300 << 20;
    leak.measures.leak = Some(Leak {
        likelihood: 0.99,
        bytes_per_s: (100 << 20) as f64,
    });
    leak.footprint_bytes = (1..=20).map(|i| i << 24).collect();
    p.lines = vec![
        line(8, "for i in range(n):", 0.6, 0.0, 0.0),
        matmul,
        leak,
        line(30, "time.sleep(0.3)", 0.0, 0.0, 0.3),
    ];
    p.threads = vec![
        ThreadStats {
            pid: 10,
            tid: 10,
            python: true,
            cpu_python_s: 0.7,
            cpu_native_s: 0.8,
            waiting_s: 0.3,
            kernel_s: 0.0,
        },
        ThreadStats {
            pid: 10,
            tid: 11,
            python: false,
            cpu_native_s: 0.5,
            ..ThreadStats::default()
        },
    ];
    p.warnings.push("example warning".into());
    p
}

impl LineStats {
    fn with_cpu(mut self, py: f64, nat: f64, sys: f64) -> LineStats {
        (
            self.measures.cpu_python_s,
            self.measures.cpu_native_s,
            self.measures.waiting_s,
        ) = (py, nat, sys);
        self
    }
}

/// Compare with `tests/snapshots/NAME`; `UPDATE_SNAPSHOTS=1` rewrites it.
fn snapshot(name: &str, got: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(name);
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, got).unwrap();
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(
        got,
        want,
        "{} differs (UPDATE_SNAPSHOTS=1 to accept)",
        path.display()
    );
}

#[test]
fn text_report_snapshot() {
    snapshot(
        "text-report.txt",
        &render_styled(&sample(), Style::default()),
    );
}

fn at(p: &Profile, width: usize) -> String {
    render_styled(
        p,
        Style {
            color: false,
            width: Some(width),
        },
    )
}

/// Every line within `width` cells.
fn fits(out: &str, width: usize) {
    for line in out.lines() {
        assert!(
            cells(line) <= width,
            "{} cells at {width}: {line:?}\n{out}",
            cells(line)
        );
    }
}

#[test]
fn narrow_terminal_keeps_line_time_and_source_never_cuts_numbers() {
    let out = at(&sample(), 60);
    snapshot("text-report-60.txt", &out);
    fits(&out, 60);
    assert!(
        out.contains("    line Python native waiting     time source"),
        "{out}"
    );
    assert!(
        out.contains("        12     0%    52%      0%   1.20 s y = x @ w  # a lo…"),
        "numbers whole, source cut:\n{out}"
    );
    assert!(out.contains("48%   dgemm_kernel_HA… (libopenblas.so)"));
    let at_80 = at(&sample(), 80);
    snapshot("text-report-80.txt", &at_80);
    assert!(
        at_80.contains("time       held source") && at_80.contains("cache.append"),
        "the leading memory figures next, source kept:\n{at_80}"
    );
    let at_120 = at(&sample(), 120);
    fits(&at_120, 120);
    assert!(at_120.contains("cache.append(np.ones(1 << 20))"));
    // Wide enough for everything: the report without a limit.
    assert_eq!(at(&sample(), 240), render(&sample()));
}

/// A profile with long source (wide characters too), names, hints, processes, ranks and
/// regions: each section at each width.
fn wide() -> Profile {
    let mut p = sample();
    p.command = vec![
        "python3".into(),
        format!("/data/{}/train.py", "x".repeat(90)),
    ];
    p.lines[0].source = format!("total = sum(配列)  # {}", "長い説明".repeat(20));
    p.lines[0].file = format!("/home/user/{}/model.py", "deep/".repeat(30));
    p.lines[1].measures.native[0].symbol = format!(
        "void at::native::{}::vectorized_loop<float, {}>(char**)",
        "detail".repeat(8),
        "T".repeat(40)
    );
    p.lines[1].measures.native[0].library = "libtorch_cpu.so".into();
    p.hints.push(crate::model::Hint {
        file: Some("/work/train.py".into()),
        line: Some(12),
        source: Some("y = np.array(x)  # @copies".into()),
        evidence: "copies 800.3 MiB and allocates 800.0 MiB: what it allocates is filled by \
                   copying"
            .into(),
        suggestion: "work in place (`a += b`, `out=`), use `np.asarray` (no copy of an array) \
                     instead of `np.array`, or a view (slicing, `reshape`) instead of a copy"
            .into(),
        saving: "up to 800.3 MiB of copies".into(),
        ..Default::default()
    });
    let mut f = crate::model::FunctionStats {
        file: format!("/site-packages/{}/module.py", "pkg/".repeat(20)),
        function: format!("Trainer.{}", "step_".repeat(20)),
        line: 7,
        ..Default::default()
    };
    f.measures.cpu_python_s = 1.0;
    p.functions.push(f);
    p.processes = vec![
        Process {
            pid: 100,
            command: p.command.clone(),
            ..Process::default()
        },
        Process {
            pid: 101,
            ppid: 100,
            rank: Some("rank 0".into()),
            command: vec!["python3".into(), "-c".into(), "配".repeat(80)],
            ..Process::default()
        },
    ];
    p.ranks = vec![crate::model::Rank {
        name: "rank 0".into(),
        pids: (1000..1030).collect(),
        ..Default::default()
    }];
    p.stragglers = vec![crate::model::Straggler {
        name: "rank 0".into(),
        file: "/work/train.py".into(),
        line: 12,
        source: "y = x @ w".into(),
        excess_s: 1.5,
        median_s: 0.5,
        ..Default::default()
    }];
    p.regions = vec![crate::model::Region {
        name: format!("tests/test_model.py::test_{}", "x".repeat(50)),
        pid: 100,
        peak_bytes: 1 << 30,
        ended: false,
        ..Default::default()
    }];
    p.warnings
        .push(format!("a long warning {}", "word ".repeat(40)));
    p
}

#[test]
fn every_width_fits_and_keeps_line_numbers_source_and_whole_hints() {
    let p = wide();
    let free = render(&p);
    assert!(free.lines().any(|l| cells(l) > 240), "the profile is wide");
    for width in [40, 60, 80, 100, 160, 240] {
        let out = at(&p, width);
        fits(&out, width);
        for (line, start) in [
            (8, "total = sum(配列)"),
            (12, "y = x @ w"),
            (20, "cache.ap"),
        ] {
            assert!(
                out.lines()
                    .any(|l| l.trim_start().starts_with(&format!("{line} ")) && l.contains(start)),
                "line {line} with {start:?} at {width}:\n{out}"
            );
        }
        // Hints and warnings whole: their words in order, wherever the lines broke.
        let words = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        let flat = words(&out);
        for h in &p.hints {
            for part in [&h.evidence, &h.suggestion, &h.saving] {
                assert!(flat.contains(&words(part)), "{part:?} at {width}:\n{out}");
            }
        }
        assert!(flat.contains(&words(p.warnings.last().unwrap())), "{width}");
        assert!(out.contains("model.py"), "the file name ends a cut path");
        assert!(
            out.contains("(libtorch_cpu.so)"),
            "the library of a cut symbol"
        );
        assert!(out.contains("(module.py:7)"), "a function's place");
    }
}

#[test]
fn colour_only_when_asked() {
    assert!(!render_styled(&sample(), Style::default()).contains('\x1b'));
    let colored = render_styled(
        &sample(),
        Style {
            color: true,
            width: None,
        },
    );
    assert!(colored.contains("\x1b[1mmlprof: python3 train.py\x1b[0m"));
    assert!(colored.contains("\x1b[33mwarning: example warning\x1b[0m"));
}

/// Names and source text come from the program: a `co_filename` with escape sequences
/// must not clear the screen or retitle the terminal, nor a newline break a table.
#[test]
fn program_strings_reach_the_terminal_escaped() {
    let evil = "\x1b]0;pwned\x07\x1b[2J\u{9b}2J\n\x01x\x7f";
    let with = |name: &str| {
        let mut p = sample();
        p.command.push(name.into());
        p.warnings.push(name.into());
        p.gpu.reason = Some(name.into());
        for l in &mut p.lines {
            l.file = format!("/work/{name}.py");
            l.function = name.into();
            l.source = format!("x = 1  # {name}");
            for n in &mut l.measures.native {
                n.symbol = name.into();
                n.library = name.into();
            }
        }
        let mut f = crate::model::FunctionStats {
            file: name.into(),
            function: name.into(),
            line: 3,
            ..Default::default()
        };
        f.measures.cpu_python_s = 1.0;
        p.functions.push(f);
        p.processes = vec![
            Process {
                command: vec![name.into()],
                python: Some(name.into()),
                rank: Some(name.into()),
                ..Process::default()
            },
            Process::default(),
        ];
        p
    };
    let p = with(evil);
    for style in [
        Style::default(),
        Style {
            color: true,
            width: Some(80),
        },
    ] {
        let out = render_styled(&p, style);
        let mut ours = out.clone();
        for code in ["\x1b[0m", "\x1b[1m", "\x1b[2m", "\x1b[31m", "\x1b[33m"] {
            ours = ours.replace(code, "");
        }
        assert!(
            !ours.chars().any(|c| c.is_control() && c != '\n'),
            "raw control character in:\n{out}"
        );
        assert!(out.contains("\\x1b]0;pwned\\x07\\x1b[2J\\u{9b}2J\\x0a\\x01x\\x7f"));
    }
    assert_eq!(
        render(&p).lines().count(),
        render(&with("plain")).lines().count(),
        "a newline in a name adds no line"
    );
}

#[test]
fn header_names_the_essentials() {
    let mut p = Profile {
        schema: SCHEMA.into(),
        wall_s: 2.5,
        ..Profile::default()
    };
    p.command = vec!["python3".into(), "train.py".into()];
    p.exit.signal = Some(9);
    p.memory.peak_heap_bytes = 300 << 20;
    p.memory.peak_at_s = 1.25;
    p.dropped_events = 3;
    p.processes = vec![
        Process::default(),
        Process {
            pid: 7,
            ..Process::default()
        },
    ];
    let text = render(&p);
    for needle in [
        "python3 train.py",
        "signal 9 (SIGKILL)",
        "300.0 MiB at 1.25 s",
        "dropped events  3",
        "Processes (2)",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
}
