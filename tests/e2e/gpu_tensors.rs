//! Tensors at the GPU peak (issue 35), without a GPU: a stand-in for PyTorch's CUDA allocator
//! and its memory history (`tests/fake-torch`, the snapshot format PyTorch documents) under
//! `tests/scripts/gpu_tensors.py`, whose tensors per line and peak are known by construction.
//! With real PyTorch on the CPU, the start-up hook never initialises CUDA.

use std::process::Command;

use mlprof::model::profile::{DeviceTensors, Profile};

use crate::cpu::markers;
use crate::fixture::{self, os};

const SCRIPT: &str = "gpu_tensors.py";
const MIB: u64 = 1 << 20;

fn fake_torch() -> String {
    fixture::root()
        .join("tests/fake-torch")
        .to_string_lossy()
        .into_owned()
}

/// Bytes of tensors at the peak of the script's line `@name` (0 when the line is absent).
fn at(p: &Profile, name: &str) -> u64 {
    let file = fixture::script(SCRIPT);
    let line = markers(SCRIPT)[name];
    p.lines
        .iter()
        .filter(|l| l.file == file.to_str().unwrap() && l.line == line)
        .map(|l| l.measures.gpu_tensor_peak_bytes)
        .sum()
}

fn device(p: &Profile) -> &DeviceTensors {
    let t = p.processes[0]
        .gpu_tensors
        .as_ref()
        .expect("the process's allocator was traced");
    assert_eq!((t.state.as_str(), t.note.as_str()), ("on", ""), "{t:?}");
    &t.devices[0]
}

#[test]
fn tensors_live_at_the_gpu_peak_are_charged_to_the_lines_that_allocated_them() {
    let torch = fake_torch();
    for py in fixture::spread(fixture::pythons()) {
        let v = &py.minor;
        let env = [("PYTHONPATH", torch.as_str())];
        let plain = Command::new(&py.exe)
            .arg(fixture::script(SCRIPT))
            .env("PYTHONPATH", &torch)
            .output()
            .unwrap();
        let run = fixture::profile_script(py, SCRIPT, &[], &env);
        // The program's own sitecustomize ran, its path is the path it has without mlprof,
        // its allocations and its out-of-memory error are its own.
        let plain = String::from_utf8_lossy(&plain.stdout);
        assert!(
            plain.starts_with("the program's own sitecustomize ran\n"),
            "{v}: {plain}"
        );
        assert_eq!(String::from_utf8_lossy(&run.output.stdout), plain, "{v}");
        let p = &run.profile;
        for (name, mib) in [
            ("tmp", 0),
            ("weights", 8),
            ("act", 16),
            ("kept", 8),
            ("after", 0),
        ] {
            assert_eq!(at(p, name), mib * MIB, "{v}: @{name}");
        }
        assert_eq!(
            at(p, "small"),
            100,
            "{v}: the bytes asked for, not the block's 512"
        );
        let d = device(p);
        // The bytes the tensors asked for, as PyTorch's own `requested_bytes` peak counts them
        // (its `memory_allocated` counts blocks, rounded up).
        let peak = 32 * MIB + 100;
        assert_eq!(d.peak_allocated_bytes, peak, "{v}: {d:?}");
        assert_eq!(d.torch_max_requested_bytes, Some(peak), "{v}");
        assert_eq!(d.torch_max_allocated_bytes, Some(32 * MIB + 512), "{v}");
        assert_eq!(d.reserved_at_peak_bytes, 40 * MIB);
        assert_eq!(d.cache_slack_bytes, 40 * MIB - peak);
        assert_eq!(d.before_trace_bytes, 0);
        let kept = d
            .top
            .iter()
            .find(|l| l.line == markers(SCRIPT)["kept"])
            .unwrap();
        assert_eq!(
            (kept.bytes, kept.blocks),
            (8 * MIB, 4),
            "{v}: one block a step"
        );
        let oom = d.oom.as_ref().expect("the failed allocation");
        assert_eq!(oom.requested_bytes, 1 << 40);
        assert_eq!(oom.at.as_ref().unwrap().line, markers(SCRIPT)["oom"]);
        assert_eq!(oom.allocated_bytes, 20 * MIB + 100, "{v}: {oom:?}");
        let held: Vec<(u32, u64)> = oom.top.iter().map(|l| (l.line, l.bytes)).collect();
        let m = markers(SCRIPT);
        assert_eq!(
            held,
            [
                (m["weights"], 8 * MIB),
                (m["kept"], 8 * MIB),
                (m["after"], 4 * MIB),
                (m["small"], 100)
            ],
            "{v}"
        );
        // mlprof's own hook is no line of the program.
        assert!(
            p.lines.iter().all(|l| !l.file.contains("mlprof")),
            "{v}: {:?}",
            p.lines.iter().map(|l| &l.file).collect::<Vec<_>>()
        );
        // The text report names them.
        let text = mlprof::render::text::render(p);
        assert!(
            text.contains("32.0 MiB of tensors at the peak at "),
            "{text}"
        );
        assert!(
            text.contains("(40.0 MiB reserved, 8.0 MiB cache slack)"),
            "{text}"
        );
        assert!(
            text.contains("16.0 MiB of tensors live at the GPU peak"),
            "{text}"
        );
    }
}

#[test]
fn a_library_asking_where_torch_is_before_importing_it_keeps_the_trace_on() {
    // transformers, datasets and accelerate call importlib.util.find_spec("torch") first.
    let torch = fake_torch();
    let py = fixture::pythons().last().unwrap();
    let run = fixture::profile_script(py, SCRIPT, &["probe"], &[("PYTHONPATH", torch.as_str())]);
    assert_eq!(device(&run.profile).peak_allocated_bytes, 32 * MIB + 100);
    assert_eq!(at(&run.profile, "act"), 16 * MIB);
}

#[test]
fn turned_off_or_ended_without_exit_handlers_the_report_says_what_it_has() {
    let torch = fake_torch();
    let py = fixture::pythons().last().unwrap();
    let env = [("PYTHONPATH", torch.as_str())];
    // `--no-gpu-tensors`: no hook, no trace; the program runs as without mlprof.
    let script = fixture::script(SCRIPT);
    let argv = [os(&py.exe), os(&script)];
    let run = fixture::profile_args(&["--no-gpu-tensors"], &argv, &env);
    assert!(run.output.status.success());
    assert!(run.profile.processes[0].gpu_tensors.is_none());
    assert!(run
        .profile
        .lines
        .iter()
        .all(|l| l.measures.gpu_tensor_peak_bytes == 0));
    // `python -S`: `site` never runs, and the hook (no `sitecustomize`: an audit hook of the
    // preload library) traces as without `-S`; the program's output is its own.
    let quiet = [os(&py.exe), os("-S"), os(&script)];
    let plain = Command::new(&py.exe)
        .args(["-S".as_ref(), script.as_os_str()])
        .env("PYTHONPATH", &torch)
        .output()
        .unwrap();
    let run = fixture::profile_args(&[], &quiet, &env);
    assert!(run.output.status.success());
    assert_eq!(run.output.stdout, plain.stdout);
    let t = run.profile.processes[0].gpu_tensors.as_ref().unwrap();
    assert_eq!(
        (t.state.as_str(), t.devices[0].peak_allocated_bytes),
        ("on", 32 * MIB + 100)
    );
    // `os._exit`: the trace was switched on and never read; the report says so.
    let run = fixture::profile_script(py, SCRIPT, &["exit"], &env);
    let t = run.profile.processes[0].gpu_tensors.as_ref().unwrap();
    assert_eq!(t.state, "unread", "{t:?}");
    assert!(t.note.contains("os._exit"), "{t:?}");
    let text = mlprof::render::text::render(&run.profile);
    assert!(text.contains("never read"), "{text}");
    // PyTorch refuses the trace: the program's CUDA runs as without mlprof; the report says why.
    let refuse = [env[0], ("FAKE_TORCH_REFUSE_HISTORY", "1")];
    let plain = Command::new(&py.exe)
        .arg(&script)
        .env("PYTHONPATH", &torch)
        .output()
        .unwrap();
    let run = fixture::profile_script(py, SCRIPT, &[], &refuse);
    assert_eq!(run.output.stdout, plain.stdout);
    let t = run.profile.processes[0].gpu_tensors.as_ref().unwrap();
    assert_eq!(t.state, "failed", "{t:?}");
    assert!(
        t.note.contains("PyTorch refused the trace: RuntimeError"),
        "{t:?}"
    );
}

#[test]
fn pytorch_on_the_cpu_never_initialises_cuda_because_of_the_hook() {
    let python = fixture::root().join("target/torch-venv/bin/python");
    let has_torch = Command::new(&python)
        .args(["-c", "import torch"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_torch {
        fixture::skipped("skipped: no torch in target/torch-venv (see bench/README.md)");
        return;
    }
    let code = "import torch\n\
                x = torch.ones(256, 256)\n\
                print(float((x @ x).sum()), torch.cuda.is_initialized())";
    let plain = Command::new(&python).args(["-c", code]).output().unwrap();
    let run = fixture::profile(&[os(&python), os("-c"), os(code)]);
    assert!(run.output.status.success());
    assert_eq!(
        String::from_utf8_lossy(&run.output.stdout),
        String::from_utf8_lossy(&plain.stdout)
    );
    assert!(String::from_utf8_lossy(&plain.stdout).ends_with("False\n"));
    assert!(run
        .profile
        .processes
        .iter()
        .all(|p| p.gpu_tensors.is_none()));
    // The hook did its part: the trace's switch waits in PyTorch's queue for a CUDA
    // initialisation, also when a library asked where torch is first.
    for probe in [
        "",
        "import importlib.util; importlib.util.find_spec('torch')\n",
    ] {
        let code = format!(
            "{probe}import torch\n\
             print(any('mlprof' in ''.join(t) for _, t in torch.cuda._queued_calls))"
        );
        let run = fixture::profile(&[os(&python), os("-c"), os(&code)]);
        assert_eq!(
            String::from_utf8_lossy(&run.output.stdout),
            "True\n",
            "{probe}"
        );
    }
}

#[test]
fn gpu_allocated_budgets_fail_the_run_naming_the_lines_and_say_when_they_cannot_be_checked() {
    let torch = fake_torch();
    let env = [("PYTHONPATH", torch.as_str())];
    let py = fixture::pythons().last().unwrap();
    let script = fixture::script(SCRIPT);
    let argv = [os(&py.exe), os(&script)];
    let m = markers(SCRIPT);
    // The peak is 32 MiB and 100 bytes, @act holding 16 MiB of it.
    let over = fixture::profile_args(&["--max-gpu-allocated", "31MiB"], &argv, &env);
    assert_eq!(over.output.status.code(), Some(97), "exceeded: exit 97");
    let v = &over.profile.violations;
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].budget.as_str(), "gpu_allocated");
    assert_eq!(v[0].line, Some(m["act"]), "{}", v[0].message);
    assert!(
        v[0].message.contains("32.0 MiB > 31.0 MiB"),
        "{}",
        v[0].message
    );
    let within = fixture::profile_args(&["--max-gpu-allocated", "33MiB"], &argv, &env);
    assert_eq!(within.output.status.code(), Some(0));
    // A budget file's [gpu-lines]: @kept holds 8 MiB at the peak.
    let dir = fixture::tempdir();
    for (limit, fails) in [("7MiB", true), ("8MiB", false)] {
        let file = dir.join(format!("mlprof-{limit}.toml"));
        let text = format!(
            "[gpu-lines]\n\"gpu_tensors.py:{}\" = \"{limit}\"\n",
            m["kept"]
        );
        std::fs::write(&file, text).unwrap();
        let run = fixture::profile_args(&["--budget", file.to_str().unwrap()], &argv, &env);
        let v = &run.profile.violations;
        assert_eq!(v.len(), usize::from(fails), "{limit}: {v:?}");
        if fails {
            assert_eq!(v[0].budget.as_str(), "gpu_line");
            assert_eq!(v[0].line, Some(m["kept"]));
        }
    }
    // No allocator traced: the budget is not passed silently.
    let run = fixture::profile_args(
        &["--no-gpu-tensors", "--max-gpu-allocated", "1GiB"],
        &argv,
        &env,
    );
    assert_eq!(run.output.status.code(), Some(97));
    let v = &run.profile.violations;
    assert!(v[0].message.starts_with("budget not checked"), "{v:?}");
}

#[test]
fn tensors_piling_up_and_cache_slack_make_hints_and_their_fixes_do_not() {
    let torch = fake_torch();
    let env = [
        ("PYTHONPATH", torch.as_str()),
        ("FAKE_CUDA_CAPACITY", "68719476736"),
    ];
    let py = fixture::pythons().last().unwrap();
    let script = "gpu_tensor_hints.py";
    let m = markers(script);
    let kinds = |p: &Profile| -> Vec<String> {
        p.hints
            .iter()
            .map(|h| h.kind.as_str().to_string())
            .collect()
    };
    let run = fixture::profile_script(py, script, &[], &env);
    let p = &run.profile;
    let growing = p.hints.iter().find(|h| h.kind.as_str() == "gpu_growing");
    let growing = growing.unwrap_or_else(|| panic!("{:?}", kinds(p)));
    assert_eq!(growing.line, Some(m["forward"]));
    assert!(
        growing.evidence.contains("1.5 GiB in 6 blocks"),
        "{}",
        growing.evidence
    );
    assert!(growing.suggestion.contains("losses.append(loss)"));
    let slack = p
        .hints
        .iter()
        .find(|h| h.kind.as_str() == "gpu_cache_slack");
    let slack = slack.unwrap_or_else(|| panic!("{:?}", kinds(p)));
    assert_eq!(slack.saving_bytes, Some(1 << 30), "{}", slack.evidence);
    let run = fixture::profile_script(py, script, &["fixed"], &env);
    let k = kinds(&run.profile);
    assert!(
        !k.iter().any(|k| k.starts_with("gpu_")),
        "the fixed loop makes no GPU hint: {k:?}"
    );
}

#[test]
fn diff_and_sweep_follow_each_lines_tensors_at_the_peak() {
    let torch = fake_torch();
    let py = fixture::pythons().last().unwrap();
    let script = "gpu_tensor_sweep.py";
    let m = markers(script);
    let dir = fixture::tempdir();
    let run = |n: &str| {
        let out = dir.join(format!("n{n}.json"));
        let path = fixture::script(script);
        let program = [os(&py.exe), os(&path), os(n)];
        fixture::run_to(&out, &program, &[("PYTHONPATH", torch.as_str())]);
        out
    };
    let (base, new) = (run("2"), run("4"));
    let out = fixture::mlprof()
        .args(["diff", "--json"])
        .args([&base, &new])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let diff: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let delta = |name: &str| -> Option<i64> {
        diff["lines"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["line"] == m[name])
            .filter(|l| {
                l["meaningful"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|f| f == "gpu_tensor_peak_bytes")
            })
            .map(|l| l["gpu_tensor_peak_bytes_delta"].as_i64().unwrap())
    };
    assert_eq!(delta("linear"), Some(2 * MIB as i64), "{diff}");
    assert_eq!(delta("square"), Some(12 * MIB as i64));
    assert_eq!(delta("constant"), None, "an unchanged line is no change");
    // The sweep fits each line's exponent exactly (exact figures).
    let out = fixture::mlprof()
        .args(["sweep", "--param", "N=2,4,8", "--json", "--"])
        .arg(&py.exe)
        .arg(fixture::script(script))
        .arg("{N}")
        .env("PYTHONPATH", &torch)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: mlprof::model::sweep::Sweep = serde_json::from_slice(&out.stdout).unwrap();
    let line = |name: &str| s.lines.iter().find(|l| l.line == m[name]).unwrap();
    let exact = |k: Option<f64>, want: f64| k.is_some_and(|k| (k - want).abs() < 1e-9);
    assert!(
        exact(line("linear").gpu_tensor_exponent, 1.0),
        "{:?}",
        line("linear")
    );
    assert!(exact(line("square").gpu_tensor_exponent, 2.0));
    assert!(exact(line("constant").gpu_tensor_exponent, 0.0));
    assert_eq!(
        line("square").gpu_tensor_peak_bytes,
        [Some(4 * MIB), Some(16 * MIB), Some(64 * MIB)]
    );
    let text = mlprof::render::sweep::sentences(&s).join("\n");
    assert!(
        text.contains("holds GPU tensors growing as N^2.00"),
        "{text}"
    );
}

#[test]
fn the_html_page_carries_the_tensors_at_the_peak_and_shows_their_section_and_column() {
    let torch = fake_torch();
    let py = fixture::pythons().last().unwrap();
    let out = fixture::mlprof()
        .args(["run", "--html", "--"])
        .arg(&py.exe)
        .arg(fixture::script(SCRIPT))
        .env("PYTHONPATH", &torch)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page = String::from_utf8(out.stdout).unwrap();
    let p = crate::gpu_regions::embedded(&page);
    let d = device(&p);
    assert_eq!(d.peak_allocated_bytes, 32 * MIB + 100);
    // PyTorch's stamps mapped to the run's clock: the peak came within the run.
    let when = d.at_s.expect("the peak's time");
    assert!(when > 0.0 && when <= p.wall_s, "{when} of {}", p.wall_s);
    assert_eq!(at(&p, "act"), 16 * MIB);
    // The page's code draws the section, the column and the peak's mark from those fields.
    for drawn in [
        "GPU tensors at the peak (PyTorch's allocator)",
        "\"GPU tensors at the peak\"",
        "gpu_tensor_peak_bytes",
        "tensors' peak",
    ] {
        assert!(page.contains(drawn), "{drawn}");
    }
}

/// Without an NVIDIA driver (no `/dev/nvidiactl`, no `/proc/driver/nvidia`), where PyTorch can
/// never initialise CUDA, `mlprof run` sets up no PyTorch hook at all (it would cost every
/// audited call of every Python process, for nothing): the fake torch is not traced, and the
/// audited calls cost what they cost with `--no-gpu-tensors`. Where a driver is present the
/// default is the hook (the rest of this file, forced with `MLPROF_GPU_TENSORS=1`).
#[test]
fn without_a_driver_no_hook_is_set_up() {
    let driver = ["/dev/nvidiactl", "/dev/dxg", "/proc/driver/nvidia/version"]
        .iter()
        .any(|p| std::path::Path::new(p).exists());
    let py = fixture::pythons().last().unwrap();
    let torch = fake_torch();
    let dir = fixture::tempdir();
    let out = dir.join("p.json");
    let run = Command::new(env!("CARGO_BIN_EXE_mlprof"))
        .args(["run", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&py.exe)
        .arg(fixture::script(SCRIPT))
        .env("PYTHONPATH", &torch)
        .env_remove("MLPROF_GPU_TENSORS")
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let p: Profile = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let traced = p.processes[0].gpu_tensors.is_some();
    assert_eq!(traced, driver, "traced: {traced}, a driver here: {driver}");
}
