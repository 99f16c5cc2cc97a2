//! From a [`Recording`] to a finished [`Profile`], the same way for every caller (the run's
//! report, its snapshots, `attach`, region pages and the answers a notebook cell or a test
//! waits for): native names → attribution → source text → hints → budget verdicts, once each,
//! in that order (hints read the source text the annotation attaches; verdicts judge the
//! finished figures). What the recording says of itself (sampling means, CPUs, attached) is
//! already in the profile attribution returns.

mod gpu_hints;
pub mod hints;
mod native_hints;
mod tensor_hints;

use crate::gate::Gate;
use crate::model::{self, Filter, Profile};
use crate::recording::{Recording, RegionSpan};
use crate::symbolize::{self, NativeNames};

/// What a profile is made with besides its recording.
#[derive(Clone, Copy)]
pub struct Options<'a> {
    /// Which files' lines count, and whose waiting.
    pub filter: &'a Filter,
    /// Draw hints (`--no-hints` turns them off).
    pub hints: bool,
    /// Budgets and baseline to judge the profile by (`None`: none given).
    pub gate: Option<&'a Gate>,
}

/// The finished profile of `rec`, its native names read from the files the processes mapped.
pub fn profile(rec: &Recording, options: &Options) -> Profile {
    let natives = symbolize::native_names(rec);
    profile_named(rec, &natives, options)
}

/// The finished profile of `rec` with native names already read (a caller that makes several
/// profiles of one recording reads them once).
pub fn profile_named(rec: &Recording, natives: &NativeNames, options: &Options) -> Profile {
    finish(model::attribute(rec, natives, options.filter), options)
}

/// The finished profile of one region of `rec` (channel `ci`'s `span`): its own lines, hints
/// and the run's sampling means and CPUs. Budgets judge the whole run, not a region.
pub fn region(
    index: &model::regions::Index,
    ci: usize,
    span: &RegionSpan,
    natives: &NativeNames,
    options: &Options,
) -> Profile {
    let profile = model::regions::profile(index, ci, span, natives, options.filter);
    finish(
        profile,
        &Options {
            gate: None,
            ..*options
        },
    )
}

/// Hints drawn again by this version's rules over a saved or merged profile (its source text
/// is already there), or none.
pub fn redraw_hints(profile: &mut Profile, on: bool) {
    profile.hints = if on { hints::of(profile) } else { Vec::new() };
}

fn finish(mut profile: Profile, options: &Options) -> Profile {
    crate::annotate::attach(&mut profile);
    redraw_hints(&mut profile, options.hints);
    profile.violations = options
        .gate
        .map(|g| g.verdicts(&profile))
        .unwrap_or_default();
    profile
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::build::RecordingBuilder;
    use crate::recording::Setup;

    fn recording() -> Recording {
        let mut rec = RecordingBuilder::new(1000).build();
        rec.setup = Setup {
            memory_sample_bytes: 128 << 10,
            copy_sample_bytes: 1 << 20,
            cpus: 3,
            attached: false,
        };
        rec
    }

    #[test]
    fn the_profile_reports_how_it_was_recorded() {
        let p = profile(
            &recording(),
            &Options {
                filter: &Filter::default(),
                hints: true,
                gate: None,
            },
        );
        assert_eq!(
            (p.memory_sample_bytes, p.copy_sample_bytes, p.cpus),
            (128 << 10, 1 << 20, 3)
        );
        assert!(!p.attached);
    }

    #[test]
    fn budgets_judge_the_finished_profile_and_no_gate_judges_nothing() {
        let mut rec = recording();
        rec.exit.usage.user_s = 0.5;
        let gate = Gate {
            budgets: crate::gate::Budgets {
                max_cpu_s: Some(0.1),
                ..Default::default()
            },
            ..Default::default()
        };
        let filter = Filter::default();
        let judged = profile(
            &rec,
            &Options {
                filter: &filter,
                hints: false,
                gate: Some(&gate),
            },
        );
        assert_eq!(judged.violations.len(), 1, "{:?}", judged.violations);
        let free = profile(
            &rec,
            &Options {
                filter: &filter,
                hints: false,
                gate: None,
            },
        );
        assert!(free.violations.is_empty());
    }
}
