//! Process trees (issue 6): children run through subprocess and fork children are profiled by
//! default and left alone with `--no-follow`, without changing what the program does.

use crate::fixture::{self, os};

#[test]
fn children_are_followed_by_default_and_not_with_no_follow() {
    let script = fixture::script("children.py");
    for py in fixture::pythons() {
        let v = &py.minor;
        let run = fixture::profile(&[os(&py.exe), os(&script)]);
        assert_eq!(run.output.stdout, b"child-says-hi\nparent done\n", "{v}");
        let procs = &run.profile.processes;
        let sh = procs
            .iter()
            .find(|p| p.command.first().is_some_and(|c| c == "sh"));
        let sh = sh.unwrap_or_else(|| panic!("{v}: the sh child is in the tree: {procs:?}"));
        assert_eq!(sh.exit.code, Some(0), "{v}");
        let forked = procs.iter().find(|p| p.forked).expect("the fork child");
        assert!(
            forked.peak_heap_bytes - forked.inherited_heap_bytes >= 20_000_000,
            "{v}: {forked:?}"
        );

        let alone = fixture::profile_args(&["--no-follow"], &[os(&py.exe), os(&script)], &[]);
        assert_eq!(
            alone.output.stdout, b"child-says-hi\nparent done\n",
            "{v}: same behaviour"
        );
        assert_eq!(
            alone.profile.processes.len(),
            1,
            "{v}: only the launched process: {:?}",
            alone.profile.processes
        );
        assert!(alone.profile.processes[0].python.is_some());
    }
}
