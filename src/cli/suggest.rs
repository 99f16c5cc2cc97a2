//! The nearest option to one the command line does not know. clap suggests only names spelled
//! alike (`--rat` → `--rate`); people also bring names from other tools that share a word with
//! ours (`--sample-rate`, scalene's `--cpu-sampling-rate` → `--rate`), which this finds. It
//! only adds to clap's error, never decides what parses.

use std::ffi::OsString;

use clap::error::{ContextKind, ContextValue, ErrorKind};

/// Add the nearest option to an unknown-argument error: clap's spelled-alike one, unless
/// another shares more of its words (`--cpu-sampling-rate`: `--rate`, not
/// `--copy-sample-bytes`). Replace clap's tip to pass the option "as a value" with `-- OPTION`,
/// which for `run` and `sweep` would run the option as the command: an option of the program
/// goes after the program.
pub(super) fn nearest_option(err: &mut clap::Error, cmd: &clap::Command, args: &[OsString]) {
    if err.kind() != ErrorKind::UnknownArgument {
        return;
    }
    let Some(ContextValue::String(unknown)) = err.get(ContextKind::InvalidArg).cloned() else {
        return;
    };
    let cmd = subcommand(cmd, args);
    let runs_a_command = cmd
        .get_arguments()
        .any(|a| a.is_trailing_var_arg_set() || a.is_last_set());
    let trailing_tip = runs_a_command && err.get(ContextKind::Suggested).is_some();
    let name = unknown.strip_prefix("--").unwrap_or_default();
    let name = name.split('=').next().unwrap_or(name);
    let clap_says = match err.get(ContextKind::SuggestedArg) {
        Some(ContextValue::String(s)) => s.strip_prefix("--").map(|s| score(name, s)),
        _ => None,
    };
    let longs = cmd.get_arguments().filter_map(|a| a.get_long());
    if let Some((best, words)) = nearest(name, longs) {
        if clap_says.is_none_or(|theirs| words > theirs) {
            err.insert(
                ContextKind::SuggestedArg,
                ContextValue::String(format!("--{best}")),
            );
        }
    }
    if trailing_tip {
        // With a suggestion shown, an empty list prints nothing; else one true tip.
        let tips = if err.get(ContextKind::SuggestedArg).is_some() {
            Vec::new()
        } else {
            vec![clap::builder::StyledStr::from(format!(
                "an option of the program goes after it: 'mlprof {} -- COMMAND {unknown}'",
                cmd.get_name()
            ))]
        };
        err.insert(ContextKind::Suggested, ContextValue::StyledStrs(tips));
    }
}

/// The (sub)command the arguments name: `mlprof jupyter install ...` → `install`.
fn subcommand<'c>(mut cmd: &'c clap::Command, args: &[OsString]) -> &'c clap::Command {
    for arg in args.iter().skip(1) {
        match arg.to_str().and_then(|a| cmd.find_subcommand(a)) {
            Some(sub) => cmd = sub,
            None => break,
        }
    }
    cmd
}

fn words(s: &str) -> Vec<String> {
    s.split(['-', '_'])
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .collect()
}

/// The share of words two option names have in common (of all their words), words alike
/// when equal or when they begin with the same four letters (`sampling`, `sample`).
fn score(a: &str, b: &str) -> f64 {
    let (a, b) = (words(a), words(b));
    // Bytes, not characters: a name typed with any letters never splits one.
    let alike = |x: &str, y: &str| {
        let (x, y) = (x.as_bytes(), y.as_bytes());
        x == y || (x.len() >= 4 && y.len() >= 4 && x[..4] == y[..4])
    };
    let shared = a
        .iter()
        .filter(|x| b.iter().any(|y| alike(x, y)))
        .count()
        .min(b.len());
    if shared == 0 {
        return 0.0;
    }
    shared as f64 / (a.len() + b.len() - shared) as f64
}

/// The option sharing the largest part of its words with `name`, if any shares one, with its
/// [`score`]; between equals, the one closest in length.
fn nearest<'a>(name: &str, longs: impl Iterator<Item = &'a str>) -> Option<(&'a str, f64)> {
    let mut best: Option<(f64, usize, &str)> = None;
    for long in longs {
        let score = score(name, long);
        let gap = long.len().abs_diff(name.len());
        if score > 0.0 && best.is_none_or(|(s, g, _)| score > s || (score == s && gap < g)) {
            best = Some((score, gap, long));
        }
    }
    best.map(|(score, _, long)| (long, score))
}

#[cfg(test)]
mod tests {
    use super::{nearest, score};

    const RUN: [&str; 8] = [
        "rate",
        "memory-sample-bytes",
        "copy-sample-bytes",
        "gpu-rate",
        "max-peak",
        "no-follow",
        "output",
        "profile-only",
    ];

    #[test]
    fn names_from_other_tools_find_ours() {
        for (given, want) in [
            ("sample-rate", Some("rate")),
            ("cpu-sampling-rate", Some("rate")),
            ("sampling-rate", Some("rate")),
            ("memory-sampling", Some("memory-sample-bytes")),
            ("follow-fork", Some("no-follow")),
            ("peak", Some("max-peak")),
            ("PROFILE_ONLY", Some("profile-only")),
            ("frobnicate", None),
            ("", None),
            ("rat", None),
            ("ééé-rate", Some("rate")),
            ("sa\u{e9}é", None),
        ] {
            assert_eq!(
                nearest(given, RUN.into_iter()).map(|n| n.0),
                want,
                "--{given}"
            );
        }
        // clap's spelled-alike suggestion gives way only to one sharing more words.
        assert!(
            score("cpu-sampling-rate", "rate") > score("cpu-sampling-rate", "copy-sample-bytes")
        );
        assert_eq!(score("max-peek", "max-peak"), score("max-peek", "max-leak"));
    }

    /// Any text typed as an option: a suggestion or none, never a panic.
    #[test]
    fn fuzzed_names_never_panic() {
        let mut rng = crate::test_rng::Rng::new(0x5eed_0f0b);
        for _ in 0..5_000 {
            let len = rng.below(24) as usize;
            let bytes = rng.bytes(len);
            let text = String::from_utf8_lossy(&bytes).replace(['\u{fffd}'], "é-");
            let _ = nearest(&text, RUN.into_iter());
        }
    }
}
