//! Every number of `versions.rs` against derive.sh's output (`expected.txt`), the debug-offset
//! specs against the positions it printed, and the reading of `_Py_DebugOffsets` on images
//! laid out from them.

extern crate std;
use super::*;
use std::format;
use std::string::String;
use std::vec::Vec;

/// derive.sh output, the source of truth for every number in `versions.rs`.
const EXPECTED: &str = include_str!("../../layouts-derivation/expected.txt");

/// The section name of a layout: `3.13`, `3.13t`.
fn section(l: &Layout) -> String {
    let mut buf = [0u8; 8];
    let n = l.name(&mut buf);
    String::from(core::str::from_utf8(&buf[..n]).unwrap())
}

/// Value of `name` in section `[section]` of expected.txt.
fn expected(section: &str, name: &str) -> Option<&'static str> {
    let mut in_section = false;
    for line in EXPECTED.lines() {
        let line = line.trim();
        if let Some(head) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            in_section = head == section;
            continue;
        }
        if in_section {
            if let Some((k, v)) = line.split_once('=') {
                if k == name {
                    return Some(v);
                }
            }
        }
    }
    None
}

fn want_opt(l: &Layout, name: &str) -> Option<usize> {
    let s = section(l);
    let v = expected(&s, name).unwrap_or_else(|| panic!("{s}: {name} missing from expected.txt"));
    if v == "none" {
        None
    } else {
        Some(
            v.parse()
                .unwrap_or_else(|_| panic!("{s}: {name}: bad value {v:?}")),
        )
    }
}

fn want(l: &Layout, name: &str) -> usize {
    want_opt(l, name).unwrap_or_else(|| panic!("{}: {name} is none", section(l)))
}

#[test]
fn every_build_in_expected_txt_has_a_layout_and_back() {
    let sections: Vec<&str> = EXPECTED
        .lines()
        .filter_map(|l| l.strip_prefix('[').and_then(|l| l.strip_suffix(']')))
        .collect();
    assert_eq!(sections.len(), ALL.len(), "expected.txt and ALL disagree");
    for l in ALL {
        assert!(sections.contains(&section(l).as_str()), "{}", section(l));
        assert_eq!(for_build(l.minor, l.free_threaded), Some(l));
    }
    for minor in 9..=15u8 {
        let l = for_version(3, minor).expect("supported");
        assert_eq!((l.major, l.minor, l.free_threaded), (3, minor, false));
    }
    for (major, minor) in [(3, 8), (3, 16), (2, 7), (4, 0), (3, 0)] {
        assert!(for_version(major, minor).is_none(), "{major}.{minor}");
    }
    assert!(for_build(12, true).is_none());
    assert_eq!(newest().minor, 15);
    assert_eq!(oldest().minor, 9);
    assert_eq!(oldest_free_threaded(), &PY313T);
}

#[test]
fn kinds_per_version() {
    for l in ALL {
        let s = section(l);
        assert_eq!(
            expected(&s, "frame_kind"),
            Some(l.frame_kind.as_str()),
            "{s}"
        );
        assert_eq!(
            expected(&s, "instr_kind"),
            Some(l.instr_kind.as_str()),
            "{s}"
        );
        assert_eq!(
            expected(&s, "line_table"),
            Some(l.line_table.as_str()),
            "{s}"
        );
    }
    assert_eq!(PY39.line_table, LineTable::Lnotab39);
    assert_eq!(PY310.line_table, LineTable::Lnotab310);
    assert_eq!(PY315.line_table, LineTable::Locations311);
}

/// Every number in `versions.rs` equals what derive.sh printed (expected.txt).
#[test]
fn matches_expected_txt() {
    for l in ALL {
        let s = section(l);
        assert_eq!(
            expected(&s, "version"),
            Some(format!("{}.{}", l.major, l.minor).as_str())
        );
        assert_eq!(want(l, "free_threaded") == 1, l.free_threaded, "{s}");
        let fields: [(&str, Option<usize>); 40] = [
            ("tstate_frame", Some(l.tstate_frame)),
            ("cframe_current_frame", Some(l.cframe_current_frame)),
            ("tstate_native_thread_id", l.tstate_native_thread_id),
            ("tstate_base_frame", l.tstate_base_frame),
            ("tstate_next", Some(l.tstate_next)),
            ("tstate_thread_id", Some(l.tstate_thread_id)),
            (
                "runtime_interpreters_head",
                Some(l.runtime_interpreters_head),
            ),
            ("interp_threads_head", Some(l.interp_threads_head)),
            ("frame_back", Some(l.frame_back)),
            ("frame_code", Some(l.frame_code)),
            ("frame_instr", Some(l.frame_instr)),
            ("frame_owner", l.frame_owner),
            ("frame_is_entry", l.frame_is_entry),
            ("owner_shim", l.owner_shim.map(usize::from)),
            ("frame_tlbc_index", l.frame_tlbc_index),
            ("object_type", Some(l.object_type)),
            ("executable_tag_mask", Some(l.executable_tag_mask)),
            ("code_filename", Some(l.code_filename)),
            ("code_name", Some(l.code_name)),
            ("code_qualname", l.code_qualname),
            ("code_firstlineno", Some(l.code_firstlineno)),
            ("code_linetable", Some(l.code_linetable)),
            ("code_code", l.code_code),
            ("code_adaptive", l.code_adaptive),
            ("code_firsttraceable", l.code_firsttraceable),
            ("code_tlbc", l.code_tlbc),
            ("code_array_entries", l.code_array_entries),
            ("bytes_size", Some(l.bytes_size)),
            ("bytes_data", Some(l.bytes_data)),
            ("ascii_object_size", Some(l.ascii_object_size)),
            ("compact_object_size", Some(l.compact_object_size)),
            ("unicode_length", Some(l.unicode_length)),
            ("unicode_state", Some(l.unicode_state)),
            (
                "unicode_state_compact_bit",
                Some(l.unicode_compact_bit.into()),
            ),
            ("unicode_state_ascii_bit", Some(l.unicode_ascii_bit.into())),
            (
                "unicode_state_kind_shift",
                Some(l.unicode_kind_shift.into()),
            ),
            (
                "unicode_state_kind_bits",
                Some(UNICODE_STATE_KIND_MASK.count_ones() as usize),
            ),
            ("code_unit_size", Some(CODE_UNIT_SIZE)),
            (
                "owner_generator",
                l.frame_owner.map(|_| OWNER_GENERATOR as usize),
            ),
            (
                "mi_segment_shift",
                l.mimalloc.map(|m| m.segment_shift.into()),
            ),
        ];
        for (name, value) in fields {
            assert_eq!(value, want_opt(l, name), "{s}: {name}");
        }
        assert_eq!(l.mimalloc.is_some(), l.free_threaded, "{s}");
        if let Some(m) = l.mimalloc {
            for (name, value) in [
                ("mi_slice_shift", m.slice_shift as usize),
                ("mi_segment_slices", m.segment_slices),
                ("mi_slices_per_segment", m.slices_per_segment),
                ("mi_slice_size", m.slice_size),
                ("mi_page_slice_offset", m.page_slice_offset),
                ("mi_page_block_size", m.page_block_size),
                ("mi_block_size_bytes", m.block_size_bytes as usize),
            ] {
                assert_eq!(value, want(l, name), "{s}: {name}");
            }
        }
    }
}

/// Each minor's debug-offsets spec: the positions derive.c printed as `dbg_<field>` (the same
/// in both builds of a minor), every one of them, and nothing else.
#[test]
fn debug_specs_match_expected_txt() {
    for l in ALL {
        let s = section(l);
        let Some(spec) = l.debug else {
            assert!(l.minor < 13, "{s} has no debug spec");
            assert!(expected(&s, "dbg_sizeof").is_none());
            continue;
        };
        assert_eq!(spec.minor, l.minor);
        assert_eq!(spec.size, want(l, "dbg_sizeof"), "{s}");
        assert!(spec.size <= MAX_SIZE);
        assert_eq!(want(l, "dbg_cookie"), 0);
        assert_eq!(want(l, "dbg_version"), VERSION);
        assert_eq!(want(l, "dbg_free_threaded"), FREE_THREADED);
        for &(field, at) in spec.fields {
            assert_eq!(
                at,
                want(l, &format!("dbg_{}", field.name())),
                "{s}: {field:?}"
            );
            assert_eq!(at % 8, 0);
            assert!(at + 8 <= spec.size);
        }
        for (i, st) in Struct::ALL.iter().enumerate() {
            let at = want(l, &format!("dbgsize_{}", st.name()));
            assert_eq!(spec.sizes[i], at, "{s}: {st:?}");
        }
        let mut lines = 0;
        let mut in_section = false;
        for line in EXPECTED.lines() {
            if let Some(head) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                in_section = head == s;
            } else if in_section && line.starts_with("dbg_") {
                lines += 1;
                let name = line["dbg_".len()..].split('=').next().unwrap();
                assert!(
                    ["cookie", "version", "free_threaded", "sizeof"].contains(&name)
                        || spec.fields.iter().any(|(f, _)| f.name() == name),
                    "{s}: expected.txt line {line:?} is not in the spec"
                );
            }
        }
        assert_eq!(lines, 4 + spec.fields.len(), "{s}");
    }
}

#[test]
fn offsets_are_plausible() {
    for l in ALL {
        let s = section(l);
        for (name, off) in [
            ("tstate_frame", l.tstate_frame),
            ("frame_back", l.frame_back),
            ("frame_code", l.frame_code),
            ("code_filename", l.code_filename),
            ("code_name", l.code_name),
            ("code_linetable", l.code_linetable),
            ("bytes_size", l.bytes_size),
            ("unicode_length", l.unicode_length),
            ("tstate_next", l.tstate_next),
            ("tstate_thread_id", l.tstate_thread_id),
            ("object_type", l.object_type),
        ] {
            assert_eq!(off % 8, 0, "{s} {name}");
            assert!(off < 512, "{s} {name}");
        }
        for off in [l.runtime_interpreters_head, l.interp_threads_head] {
            assert_eq!(off % 8, 0, "{s}");
            assert!(off < 16384, "{s}");
        }
        assert_eq!(l.tstate_next, 8);
        if let Some(spec) = l.debug {
            // _Py_DebugOffsets is the first member of _PyRuntimeState.
            assert!(l.runtime_interpreters_head >= spec.size, "{s}");
        }
        assert_eq!(l.object_type, if l.free_threaded { 24 } else { 8 }, "{s}");
        let header = l.object_type + 8; // PyObject, then ob_size
        assert_eq!((l.bytes_size, l.bytes_data), (header, header + 16), "{s}");
        assert_eq!(l.code_name, l.code_filename + 8);
        if let Some(q) = l.code_qualname {
            assert_eq!(q, l.code_name + 8);
            assert_eq!(l.code_linetable, q + 8);
        }
        if let Some(a) = l.code_adaptive {
            assert!(a > l.code_linetable && a > l.code_firstlineno);
            assert!(a > l.code_firsttraceable.unwrap());
        }
        if let Some(o) = l.frame_owner {
            assert!(o > l.frame_instr && o > l.frame_back && o > l.frame_code);
            if let Some(e) = l.frame_is_entry {
                assert_eq!(o, e + 1);
            }
        }
        assert_eq!(l.owner_shim, (l.minor >= 12).then_some(3), "{s}");
        assert_eq!(l.executable_tag_mask != 0, l.minor >= 14, "{s}");
        assert_eq!(l.tstate_base_frame.is_some(), l.minor >= 15, "{s}");
        assert_eq!(
            l.frame_tlbc_index.is_some(),
            l.free_threaded && l.minor >= 14,
            "{s}"
        );
        assert_eq!(l.code_tlbc.is_some(), l.frame_tlbc_index.is_some(), "{s}");
        assert!(l.unicode_length < l.unicode_state);
        assert!(l.unicode_state + 4 <= l.ascii_object_size);
        assert!(l.compact_object_size > l.ascii_object_size);
        assert!(l.unicode_compact_bit < l.unicode_ascii_bit && l.unicode_ascii_bit < 32);
        assert!(l.unicode_kind_shift + 3 <= l.unicode_compact_bit);
    }
}

/// A `_Py_DebugOffsets` image of `l` (laid out by its spec), with plausible struct sizes.
pub(crate) fn table_of(l: &Layout) -> Vec<u8> {
    const SIZES: [u64; 8] = [1 << 16, 1 << 15, 4096, 256, 512, 64, 64, 128];
    let spec = l.debug.unwrap();
    let mut t = std::vec![0u8; spec.size];
    let mut put = |at: usize, v: u64| t[at..at + 8].copy_from_slice(&v.to_le_bytes());
    put(VERSION, (3 << 24) | ((l.minor as u64) << 16) | 0x00f0);
    put(FREE_THREADED, l.free_threaded as u64);
    for (&at, &size) in spec.sizes.iter().zip(SIZES.iter()) {
        put(at, size);
    }
    for &(field, at) in spec.fields {
        put(at, field.get(l).unwrap_or(0) as u64);
    }
    t[..8].copy_from_slice(COOKIE);
    t
}

#[test]
fn a_table_laid_out_from_a_layout_reads_back_as_it() {
    for l in ALL.iter().filter(|l| l.debug.is_some()) {
        let t = table_of(l);
        let read = from_table(&t, l.debug.unwrap(), l, (3, l.minor), l.free_threaded);
        assert_eq!(read, Ok(**l), "{}", section(l));
    }
}

#[test]
fn a_bad_table_is_refused_not_read() {
    let l = &PY314;
    let spec = l.debug.unwrap();
    let read = |t: &[u8]| from_table(t, spec, l, (3, 14), false);
    let mut t = table_of(l);
    t[0] = b'X';
    assert_eq!(read(&t), Err(Refusal::NotTheTable));
    // Another minor's version, or the other build.
    assert_eq!(
        from_table(&table_of(l), spec, l, (3, 15), false),
        Err(Refusal::NotTheTable)
    );
    assert_eq!(
        from_table(&table_of(l), spec, l, (3, 14), true),
        Err(Refusal::NotTheTable)
    );
    // An offset past the struct it points into; a misaligned pointer; an absurd size.
    let at = |f: Field| spec.fields.iter().find(|(g, _)| *g == f).unwrap().1;
    let mut t = table_of(l);
    t[at(Field::FrameBack)..][..8].copy_from_slice(&9000u64.to_le_bytes());
    assert_eq!(read(&t), Err(Refusal::Invalid("frame_back")));
    let mut t = table_of(l);
    t[at(Field::CodeFilename)..][..8].copy_from_slice(&113u64.to_le_bytes());
    assert_eq!(read(&t), Err(Refusal::Invalid("code_filename")));
    let mut t = table_of(l);
    t[spec.sizes[3]..][..8].copy_from_slice(&u64::MAX.to_le_bytes());
    assert_eq!(read(&t), Err(Refusal::Invalid("frame")));
    assert_eq!(read(&t[..100]), Err(Refusal::Unreadable));
}

/// A memory holding one table at a fixed address.
struct At(usize, Vec<u8>);

impl crate::Memory for At {
    fn bytes(&self, addr: usize, out: &mut [u8]) -> Option<()> {
        let start = addr.checked_sub(self.0)?;
        out.copy_from_slice(self.1.get(start..start + out.len())?);
        Some(())
    }
}

#[test]
fn known_minors_agree_with_the_table_unless_tables_are_off_and_newer_ones_read_as_the_newest() {
    const RT: usize = 0x7000_0000;
    for l in ALL.iter().filter(|l| l.debug.is_some()) {
        let mem = At(RT, table_of(l));
        let v = (3, l.minor);
        assert_eq!(
            layout(&mem, RT, v, l.free_threaded, true),
            Ok((**l, Source::Table))
        );
        assert_eq!(
            layout(&mem, RT, v, l.free_threaded, false),
            Ok((**l, Source::Offsets))
        );
    }
    // 3.12 publishes nothing: the table, whatever the memory holds.
    assert_eq!(
        layout(&At(RT, Vec::new()), 0, (3, 12), false, false),
        Ok((PY312, Source::Table))
    );
    assert_eq!(
        layout(&At(RT, Vec::new()), 0, (3, 8), false, true),
        Err(Refusal::Unsupported)
    );
    assert_eq!(
        layout(&At(RT, Vec::new()), 0, (3, 12), true, true),
        Err(Refusal::Unsupported)
    );
    // A 3.16 whose table is 3.15's with the code object's fields 8 bytes further on.
    let mut moved = PY315;
    moved.minor = 16;
    for f in [
        &mut moved.code_filename,
        &mut moved.code_name,
        &mut moved.code_linetable,
    ] {
        *f += 8;
    }
    moved.code_qualname = moved.code_qualname.map(|q| q + 8);
    moved.code_adaptive = moved.code_adaptive.map(|a| a + 8);
    let mem = At(RT, table_of(&moved));
    let (read, source) = layout(&mem, RT, (3, 16), false, true).unwrap();
    assert_eq!(source, Source::Offsets);
    assert_eq!(read.minor, 16);
    assert_eq!(read.code_filename, PY315.code_filename + 8);
    // What it does not carry keeps its distance to the bytecode.
    assert_eq!(
        read.code_firsttraceable,
        PY315.code_firsttraceable.map(|f| f + 8)
    );
    assert_eq!(read.owner_shim, PY315.owner_shim);
    // Unreadable memory is a refusal, not a guess.
    assert_eq!(
        layout(&At(RT, Vec::new()), RT, (3, 14), false, true),
        Err(Refusal::Unreadable)
    );
}
