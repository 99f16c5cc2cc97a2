//! The profiler leaves no trace a Python program can see of its start-up (issue 46): under
//! `-S`, `-I`, `-E`, `-s`, `PYTHONSAFEPATH`, with a `sitecustomize` of its own, and when that
//! `sitecustomize` ends the program or fails, `sys.path`, `sys.modules`, `sys.meta_path`,
//! `sys.path_hooks`, `sys.flags`, the environment (but `LD_PRELOAD` and `MLPROF_*`, which name
//! the profiler: the one documented difference), stdout, stderr and the exit status are what
//! they are without mlprof.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::fixture;

/// Variables of the test's own environment that would change what Python sees: unset in both.
const UNSET: [&str; 6] = [
    "PYTHONPATH",
    "PYTHONSAFEPATH",
    "PYTHONNOUSERSITE",
    "PYTHONSTARTUP",
    "PYTHONMALLOC",
    "PYTHONDEVMODE",
];

/// The program under `python FLAGS`, without mlprof and under `mlprof run -o`: both outputs.
fn both(py: &Path, flags: &[&str], script: &Path, env: &[(&str, &str)]) -> (Output, Output) {
    let dir = fixture::tempdir();
    let mut plain = Command::new(py);
    let mut profiled = fixture::mlprof();
    profiled
        .args(["run", "-o"])
        .arg(dir.join("p.json"))
        .arg("--")
        .arg(py);
    for c in [&mut plain, &mut profiled] {
        c.args(flags).arg(script).stdin(Stdio::null());
        for var in UNSET {
            c.env_remove(var);
        }
        c.envs(env.iter().copied());
    }
    let plain = plain.output().unwrap();
    let profiled = profiled.output().unwrap();
    assert!(
        dir.join("p.json").is_file(),
        "no profile: {}",
        text(&profiled.stderr)
    );
    (plain, profiled)
}

/// A case: its name, the interpreter's flags, the environment it adds.
type Case<'a> = (&'a str, &'a [&'a str], &'a [(&'a str, &'a str)]);

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn the_program_sees_its_start_up_as_without_mlprof_under_every_flag() {
    let script = fixture::script("what_python_sees.py");
    let dir = fixture::tempdir();
    // A directory of the program's own on PYTHONPATH, with its own sitecustomize.
    let own = dir.join("own");
    std::fs::create_dir_all(&own).unwrap();
    std::fs::write(
        own.join("sitecustomize.py"),
        "import sys\nsys.own_customize = True\nprint('own sitecustomize', file=sys.stderr)\n",
    )
    .unwrap();
    let own_path = own.to_str().unwrap();
    let cases: [Case; 8] = [
        ("no flag", &[], &[]),
        ("-S", &["-S"], &[("PYTHONPATH", own_path)]),
        ("-I", &["-I"], &[("PYTHONPATH", own_path)]),
        ("-E", &["-E"], &[("PYTHONPATH", own_path)]),
        ("-s", &["-s"], &[]),
        ("-S -E", &["-S", "-E"], &[]),
        ("PYTHONSAFEPATH", &[], &[("PYTHONSAFEPATH", "1")]),
        ("own sitecustomize", &[], &[("PYTHONPATH", own_path)]),
    ];
    for py in fixture::spread(fixture::pythons())
        .into_iter()
        .chain(fixture::free_threaded().iter().take(1))
    {
        for (name, flags, env) in cases {
            let (plain, profiled) = both(&py.exe, flags, &script, env);
            let v = format!("{} {name}", py.minor);
            assert!(plain.status.success(), "{v}: {}", text(&plain.stderr));
            assert_eq!(
                text(&profiled.stdout),
                text(&plain.stdout),
                "{v}: what Python sees"
            );
            assert_eq!(text(&profiled.stderr), text(&plain.stderr), "{v}: stderr");
            assert_eq!(profiled.status.code(), plain.status.code(), "{v}");
        }
    }
}

/// A debug allocator chosen at start-up (`-X dev`, `PYTHONDEVMODE`, `PYTHONMALLOC=debug`): the
/// program runs and exits as without mlprof (an audit hook registered before the switch would
/// be freed by the debug allocator at exit, which aborts on it: the hook is left out then).
/// Default builds only: a free-threaded one also has mlprof warn that its allocator changed.
#[test]
fn a_debug_allocator_at_start_up_runs_and_exits_as_without_mlprof() {
    let script = fixture::script("what_python_sees.py");
    let cases: [Case; 5] = [
        ("-X dev", &["-X", "dev"], &[]),
        ("-Xdev -W", &["-Xdev", "-W", "default"], &[]),
        ("PYTHONDEVMODE", &[], &[("PYTHONDEVMODE", "1")]),
        ("PYTHONMALLOC=debug", &[], &[("PYTHONMALLOC", "debug")]),
        (
            "PYTHONMALLOC=malloc_debug",
            &[],
            &[("PYTHONMALLOC", "malloc_debug")],
        ),
    ];
    for py in fixture::spread(fixture::pythons()) {
        for (name, flags, env) in cases {
            let (plain, profiled) = both(&py.exe, flags, &script, env);
            let v = format!("{} {name}", py.minor);
            assert!(plain.status.success(), "{v}: {}", text(&plain.stderr));
            assert_eq!(text(&profiled.stderr), text(&plain.stderr), "{v}: stderr");
            assert_eq!(text(&profiled.stdout), text(&plain.stdout), "{v}");
            assert_eq!(profiled.status.code(), plain.status.code(), "{v}");
        }
    }
}

/// A program's own `sitecustomize` that ends the program (`sys.exit` with a message) or fails
/// (an exception, which `site` reports in one line and goes on): the same message, the same
/// status, and no frame or path of mlprof's in what Python prints.
#[test]
fn a_sitecustomize_that_exits_or_fails_prints_what_it_prints_without_mlprof() {
    let script = fixture::script("what_python_sees.py");
    let dir = fixture::tempdir();
    for (name, source) in [
        (
            "exits",
            "import sys\nsys.exit('stopped by the own sitecustomize')\n",
        ),
        (
            "fails",
            "raise ValueError('the own sitecustomize failed')\n",
        ),
        ("traceback", "import traceback\ntraceback.print_stack()\n"),
    ] {
        let own = dir.join(name);
        std::fs::create_dir_all(&own).unwrap();
        std::fs::write(own.join("sitecustomize.py"), source).unwrap();
        let env = [("PYTHONPATH", own.to_str().unwrap())];
        for py in fixture::spread(fixture::pythons()) {
            let (plain, profiled) = both(&py.exe, &[], &script, &env);
            let v = format!("{} {name}", py.minor);
            assert_eq!(text(&profiled.stderr), text(&plain.stderr), "{v}");
            assert_eq!(text(&profiled.stdout), text(&plain.stdout), "{v}");
            assert_eq!(profiled.status.code(), plain.status.code(), "{v}");
            let err = text(&profiled.stderr);
            assert!(
                !err.contains("<mlprof") && !err.contains("libmlprof"),
                "{v}: {err}"
            );
        }
    }
}
