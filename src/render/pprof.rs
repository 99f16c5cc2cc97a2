//! pprof's `profile.proto`, gzipped: what `go tool pprof`, Pyroscope, Parca and Grafana read.
//! Sample types: `cpu` and `wall` (nanoseconds), `alloc_space` and `inuse_space` (bytes; in-use
//! meaning "held at the heap peak"); the default one, which viewers show first, is the
//! export's [`Measure`] ([`sample_type`]). Python frames are functions with file and line;
//! native frames are functions in a mapping named after their library. Each sample carries
//! the profile's labels and its process id. Encoded by hand: the format is a handful of
//! varint and length-delimited fields.
//!
//! A Python function's name is written as its `name` only, with no `system_name`: pprof
//! reads a function whose two names are equal as a C++ name still to be simplified and
//! strips what is between `<` and `>`, which would leave module-level code (`<module>`),
//! `<lambda>` and comprehensions nameless, shown as the mapping (`[python train.py]`).
//! Native symbols keep both names, so C++ templates are simplified as viewers expect.
//!
//! A stack with no frame (CPU a thread used outside Python: the interpreter's start-up and
//! shutdown, a thread without Python, a late sample taken there) is the function
//! [`NO_FRAME`], as in the folded export: pprof shows a sample without a location in no row,
//! only in the total.

use std::collections::HashMap;
use std::io::Write;

use super::{Measure, NO_FRAME};
use crate::error::{Error, Result};
use crate::model::{Profile, StackFrame, StackStats};

/// The gzipped profile, with `measure` as its default sample type.
pub fn render(p: &Profile, measure: Measure) -> Result<Vec<u8>> {
    let raw = encode(p, measure);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&raw)
        .and_then(|_| gz.finish())
        .map_err(|e| Error::new(format!("pprof export: {e}")))
}

/// Protobuf writer: just what profile.proto needs.
#[derive(Default)]
struct Pb(Vec<u8>);

impl Pb {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push(v as u8 | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
    fn int(&mut self, field: u32, v: u64) {
        if v != 0 {
            self.varint((field as u64) << 3);
            self.varint(v);
        }
    }
    fn bytes(&mut self, field: u32, b: &[u8]) {
        self.varint((field as u64) << 3 | 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }
    fn message(&mut self, field: u32, m: Pb) {
        self.bytes(field, &m.0);
    }
    fn packed(&mut self, field: u32, values: &[u64]) {
        let mut inner = Pb::default();
        for &v in values {
            inner.varint(v);
        }
        self.bytes(field, &inner.0);
    }
}

/// The string table (index 0 is "").
#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, u64>,
}

impl Strings {
    fn id(&mut self, s: &str) -> u64 {
        if self.table.is_empty() {
            self.table.push(String::new());
            self.index.insert(String::new(), 0);
        }
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as u64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

fn value_type(strings: &mut Strings, kind: &str, unit: &str) -> Pb {
    let mut m = Pb::default();
    m.int(1, strings.id(kind));
    m.int(2, strings.id(unit));
    m
}

/// The sample types, in the order of each sample's values.
const SAMPLE_TYPES: [(Measure, &str, &str); 4] = [
    (Measure::Cpu, "cpu", "nanoseconds"),
    (Measure::Wall, "wall", "nanoseconds"),
    (Measure::Alloc, "alloc_space", "bytes"),
    (Measure::Peak, "inuse_space", "bytes"),
];

/// The sample type a measure is written as (and made the default of the file).
pub fn sample_type(measure: Measure) -> &'static str {
    SAMPLE_TYPES
        .iter()
        .find(|t| t.0 == measure)
        .map_or("cpu", |t| t.1)
}

fn encode(p: &Profile, measure: Measure) -> Vec<u8> {
    let mut s = Strings::default();
    let mut out = Pb::default();
    for (_, kind, unit) in SAMPLE_TYPES {
        out.message(1, value_type(&mut s, kind, unit));
    }
    // Location and function ids are frame index + 1; the one after them is [`NO_FRAME`].
    let no_frame = p.stack_frames.len() as u64 + 1;
    for stack in &p.stacks {
        out.message(2, sample(p, stack, no_frame, &mut s));
    }
    // Mapping 1 is the profiled program (pprof shows the first mapping as the profile's file);
    // Python frames belong to it. Native frames get one mapping per library.
    let program = super::shown_command(&p.command);
    let mut main = Pb::default();
    main.int(1, 1);
    main.int(5, s.id(&program));
    main.int(7, 1);
    out.message(3, main);
    let mut mappings: HashMap<String, u64> = HashMap::new();
    mappings.insert(PROGRAM.to_string(), 1);
    for f in p.stack_frames.iter().filter(|f| f.line == 0) {
        let next = mappings.len() as u64 + 1;
        let id = *mappings.entry(f.file.clone()).or_insert(next);
        if id == next {
            let mut m = Pb::default();
            m.int(1, id);
            m.int(5, s.id(&f.file));
            m.int(7, 1); // has_functions
            out.message(3, m);
        }
    }
    for (i, f) in p.stack_frames.iter().enumerate() {
        out.message(4, location(i as u64 + 1, f, &mappings));
        out.message(5, function(i as u64 + 1, f, &mut s));
    }
    if p.stacks.iter().any(|stack| stack.frames.is_empty()) {
        let f = StackFrame {
            file: String::new(),
            function: NO_FRAME.to_string(),
            line: 1, // a Python-like name: no system name for pprof to strip of `<...>`
        };
        out.message(4, location(no_frame, &f, &mappings));
        out.message(5, function(no_frame, &f, &mut s));
    }
    out.message(11, value_type(&mut s, "cpu", "nanoseconds"));
    let default = s.id(sample_type(measure));
    for text in &s.table {
        out.bytes(6, text.as_bytes());
    }
    out.int(10, (p.wall_s * 1e9) as u64);
    out.int(12, (p.sample_interval_s * 1e9) as u64);
    out.int(14, default);
    out.0
}

/// One stack as a sample: its locations (leaf first), its four values, and its labels: the
/// profile's (host, rank, ...), the rank of its process in a merged profile, and `pid`.
fn sample(p: &Profile, stack: &StackStats, no_frame: u64, s: &mut Strings) -> Pb {
    let mut sample = Pb::default();
    // location ids are frame index + 1; pprof lists the leaf first.
    let mut locations: Vec<u64> = stack.frames.iter().rev().map(|&f| f as u64 + 1).collect();
    if locations.is_empty() {
        locations.push(no_frame);
    }
    sample.packed(1, &locations);
    let ns = |secs: f64| (secs * 1e9).round() as u64;
    let cpu = ns(stack.cpu_python_s + stack.cpu_native_s + stack.kernel_s);
    sample.packed(
        2,
        &[
            cpu,
            cpu + ns(stack.waiting_s),
            stack.alloc_bytes,
            stack.peak_bytes,
        ],
    );
    let mut label = |key: &str, text: Option<&str>, number: u64| {
        let mut m = Pb::default();
        m.int(1, s.id(key));
        m.int(2, text.map_or(0, |t| s.id(t)));
        m.int(3, number);
        sample.message(3, m);
    };
    for (key, value) in &p.labels {
        label(key, Some(value), 0);
    }
    if !p.labels.contains_key("rank") {
        let rank = p
            .processes
            .iter()
            .find(|q| q.pid == stack.pid)
            .and_then(|q| q.rank.as_deref());
        if let Some(rank) = rank {
            label("rank", Some(rank.strip_prefix("rank ").unwrap_or(rank)), 0);
        }
    }
    if stack.pid != 0 {
        label("pid", None, stack.pid as u64);
    }
    sample
}

/// Key of the program's own mapping (no library file can be named this).
const PROGRAM: &str = "\0program";

fn location(id: u64, f: &StackFrame, mappings: &HashMap<String, u64>) -> Pb {
    let mut m = Pb::default();
    m.int(1, id);
    let key = if f.line == 0 {
        f.file.as_str()
    } else {
        PROGRAM
    };
    m.int(2, mappings.get(key).copied().unwrap_or(0));
    let mut line = Pb::default();
    line.int(1, id); // function id = location id
    line.int(2, f.line as u64);
    m.message(4, line);
    m
}

fn function(id: u64, f: &StackFrame, s: &mut Strings) -> Pb {
    let mut m = Pb::default();
    m.int(1, id);
    m.int(2, s.id(&f.function));
    if f.line == 0 {
        // Native: the system name too, so that viewers simplify C++ names (module docs).
        m.int(3, s.id(&f.function));
    }
    m.int(4, s.id(&f.file));
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// A protobuf field: (field number, wire type, payload; a varint as 8 bytes).
    type Field = (u64, u64, Vec<u8>);

    /// The top-level fields of a protobuf message.
    fn fields(mut b: &[u8]) -> Vec<Field> {
        let varint = |b: &mut &[u8]| {
            let (mut v, mut shift) = (0u64, 0);
            loop {
                let byte = b[0];
                *b = &b[1..];
                v |= ((byte & 0x7f) as u64) << shift;
                shift += 7;
                if byte < 0x80 {
                    return v;
                }
            }
        };
        let mut out = Vec::new();
        while !b.is_empty() {
            let key = varint(&mut b);
            let payload = match key & 7 {
                0 => varint(&mut b).to_le_bytes().to_vec(),
                2 => {
                    let len = varint(&mut b) as usize;
                    let (p, rest) = b.split_at(len);
                    b = rest;
                    p.to_vec()
                }
                other => panic!("unexpected wire type {other}"),
            };
            out.push((key >> 3, key & 7, payload));
        }
        out
    }

    /// The decompressed protobuf of `p` exported with `measure`: its top-level fields and its
    /// string table.
    fn decoded(p: &Profile, measure: Measure) -> (Vec<Field>, Vec<String>) {
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(&render(p, measure).unwrap()[..])
            .read_to_end(&mut raw)
            .unwrap();
        let top = fields(&raw);
        let strings = top
            .iter()
            .filter(|f| f.0 == 6)
            .map(|f| String::from_utf8(f.2.clone()).unwrap())
            .collect();
        (top, strings)
    }

    /// A varint field's value.
    fn int(f: &Field) -> u64 {
        u64::from_le_bytes(f.2[..8].try_into().unwrap())
    }

    fn two_frames() -> Profile {
        use crate::model::{StackStats, SCHEMA};
        let mut p = Profile {
            schema: SCHEMA.into(),
            command: vec!["python3".into(), "t.py".into()],
            ..Profile::default()
        };
        p.stack_frames = vec![
            StackFrame {
                file: "/t.py".into(),
                function: "<module>".into(),
                line: 4,
            },
            StackFrame {
                file: "libopenblas.so".into(),
                function: "dgemm".into(),
                line: 0,
            },
        ];
        p.stacks = vec![StackStats {
            pid: 42,
            frames: vec![0, 1],
            cpu_native_s: 0.5,
            alloc_bytes: 7,
            ..StackStats::default()
        }];
        p.labels.insert("host".into(), "node1".into());
        p
    }

    #[test]
    fn the_profile_proto_decodes_with_samples_locations_and_strings() {
        let (top, strings) = decoded(&two_frames(), Measure::Cpu);
        let count = |n| top.iter().filter(|f| f.0 == n).count();
        assert_eq!(
            (count(1), count(2), count(3), count(4), count(5)),
            (4, 1, 2, 2, 2)
        );
        assert_eq!(strings[0], "");
        for s in [
            "cpu",
            "alloc_space",
            "<module>",
            "/t.py",
            "dgemm",
            "libopenblas.so",
            "python3 t.py",
        ] {
            assert!(strings.iter().any(|x| x == s), "{s} in the string table");
        }
        let sample = fields(&top.iter().find(|f| f.0 == 2).unwrap().2);
        assert_eq!(sample[0].2, vec![2, 1], "leaf location first");
        let labels: Vec<(String, String, u64)> = sample
            .iter()
            .filter(|f| f.0 == 3)
            .map(|f| {
                let l = fields(&f.2);
                let get = |n| l.iter().find(|x| x.0 == n).map_or(0, int);
                (
                    strings[get(1) as usize].clone(),
                    strings[get(2) as usize].clone(),
                    get(3),
                )
            })
            .collect();
        assert_eq!(
            labels,
            [
                ("host".to_string(), "node1".to_string(), 0),
                ("pid".to_string(), String::new(), 42)
            ]
        );
    }

    /// `go tool pprof` shows the default sample type first: the measure asked for.
    #[test]
    fn the_default_sample_type_is_the_measure() {
        for (measure, want) in [
            (Measure::Cpu, "cpu"),
            (Measure::Wall, "wall"),
            (Measure::Alloc, "alloc_space"),
            (Measure::Peak, "inuse_space"),
        ] {
            let (top, strings) = decoded(&two_frames(), measure);
            let default = top.iter().find(|f| f.0 == 14).map(int);
            assert_eq!(
                default.map(|i| strings[i as usize].as_str()),
                Some(want),
                "{measure:?}"
            );
            let types: Vec<&str> = top
                .iter()
                .filter(|f| f.0 == 1)
                .map(|f| strings[int(&fields(&f.2)[0]) as usize].as_str())
                .collect();
            assert!(types.contains(&want), "{types:?}");
        }
    }

    /// A stack without frames is a function of its own, not a sample pprof shows in no row.
    #[test]
    fn a_stack_without_frames_is_the_no_frame_function() {
        let mut p = two_frames();
        p.stacks.push(StackStats {
            pid: 42,
            cpu_python_s: 0.25,
            ..StackStats::default()
        });
        let (top, strings) = decoded(&p, Measure::Cpu);
        let samples: Vec<Vec<Field>> = top
            .iter()
            .filter(|f| f.0 == 2)
            .map(|f| fields(&f.2))
            .collect();
        assert_eq!(samples[1][0].2, vec![3], "the location after the frames'");
        let functions: Vec<Vec<Field>> = top
            .iter()
            .filter(|f| f.0 == 5)
            .map(|f| fields(&f.2))
            .collect();
        let third = &functions[2];
        assert_eq!(int(&third[0]), 3);
        assert_eq!(strings[int(&third[1]) as usize], NO_FRAME);
        assert!(third.iter().all(|f| f.0 != 3), "no system name to strip");
        // Without such a stack, no such function.
        let (top, _) = decoded(&two_frames(), Measure::Cpu);
        assert_eq!(top.iter().filter(|f| f.0 == 5).count(), 2);
    }

    /// A Python function has a name and no system name (which pprof would strip of `<...>`);
    /// a native one has both.
    #[test]
    fn module_level_code_keeps_its_name_and_native_symbols_their_system_name() {
        let (top, strings) = decoded(&two_frames(), Measure::Cpu);
        let names: Vec<(String, Option<String>)> = top
            .iter()
            .filter(|f| f.0 == 5)
            .map(|f| {
                let fs = fields(&f.2);
                let get = |n| fs.iter().find(|x| x.0 == n).map(int);
                (
                    strings[get(2).unwrap() as usize].clone(),
                    get(3).map(|i| strings[i as usize].clone()),
                )
            })
            .collect();
        assert_eq!(
            names,
            [
                ("<module>".to_string(), None),
                ("dgemm".to_string(), Some("dgemm".to_string()))
            ]
        );
    }
}
