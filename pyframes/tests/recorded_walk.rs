//! The walker on memory images recorded from live interpreters, one per build
//! (`tests/images/3.X.txt`, written by `tests/images/record.py` under that interpreter): the
//! bytes of `_Py_DebugOffsets`, a thread state, its frames, their code objects and the strings
//! they name, as the interpreter laid them out (real tagged references, entry frames of calls
//! from C, generator and class-body frames, 3.15's base frame, free-threaded headers), and what
//! Python itself said of each frame. The layout is found as the preload library finds it (from
//! the image's `_Py_DebugOffsets` on 3.13+, with the derived table and without), and each frame
//! the walk gives must be Python's: file, qualified name, first line and instruction offset.

use mlprof_pyframes::check::{self_check, Check, Types};
use mlprof_pyframes::code::describe;
use mlprof_pyframes::layouts::{self, Source};
use mlprof_pyframes::walk::{walk, Frame};
use mlprof_pyframes::{Interpreter, Memory};

/// A recorded image: the regions it copied; reads outside them fail.
struct Image {
    regions: Vec<(usize, Vec<u8>)>,
}

impl Memory for Image {
    fn bytes(&self, addr: usize, out: &mut [u8]) -> Option<()> {
        let (start, data) = self
            .regions
            .iter()
            .find(|(start, data)| addr >= *start && addr + out.len() <= start + data.len())?;
        out.copy_from_slice(&data[addr - start..addr - start + out.len()]);
        Some(())
    }
}

/// What Python said of one frame.
#[derive(Debug)]
struct Truth {
    firstlineno: i32,
    lasti: i32,
    qualname: String,
    file: String,
}

struct Recording {
    build: String,
    version: String,
    symbols: std::collections::HashMap<String, usize>,
    tstate: usize,
    frames: Vec<Truth>,
    image: Image,
}

fn hex(s: &str) -> usize {
    usize::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex address")
}

fn parse(text: &str) -> Recording {
    let mut r = Recording {
        build: String::new(),
        version: String::new(),
        symbols: Default::default(),
        tstate: 0,
        frames: Vec::new(),
        image: Image {
            regions: Vec::new(),
        },
    };
    for line in text.lines() {
        let mut it = line.splitn(5, ' ');
        match it.next() {
            Some("build") => r.build = it.next().unwrap().to_string(),
            Some("version") => r.version = it.next().unwrap().to_string(),
            Some("symbol") => {
                let name = it.next().unwrap().to_string();
                r.symbols.insert(name, hex(it.next().unwrap()));
            }
            Some("tstate") => r.tstate = hex(it.next().unwrap()),
            Some("frame") => r.frames.push(Truth {
                firstlineno: it.next().unwrap().parse().unwrap(),
                lasti: it.next().unwrap().parse().unwrap(),
                qualname: it.next().unwrap().to_string(),
                file: it.next().unwrap().to_string(),
            }),
            Some("mem") => {
                let addr = hex(it.next().unwrap());
                let data = it.next().unwrap();
                let bytes = (0..data.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&data[i..i + 2], 16).unwrap())
                    .collect();
                r.image.regions.push((addr, bytes));
            }
            _ => {}
        }
    }
    r
}

fn recordings() -> Vec<Recording> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/images");
    let mut out: Vec<Recording> = std::fs::read_dir(&dir)
        .expect("tests/images")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .map(|p| parse(&std::fs::read_to_string(p).unwrap()))
        .collect();
    out.sort_by(|a, b| a.build.cmp(&b.build));
    out
}

/// The text of a `str` or `bytes` blob in the image (ASCII, latin-1 or UCS-2/4).
fn text(mem: &Image, blob: mlprof_pyframes::code::Blob) -> String {
    let mut raw = vec![0u8; blob.len];
    mem.bytes(blob.addr, &mut raw).expect("blob in the image");
    match blob.kind {
        2 => String::from_utf16_lossy(
            &raw.chunks(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .collect::<Vec<_>>(),
        ),
        4 => raw
            .chunks(4)
            .filter_map(|c| char::from_u32(u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        _ => raw.iter().map(|&b| b as char).collect(),
    }
}

#[test]
fn every_layout_has_a_recording_and_every_recording_a_layout() {
    let recorded: Vec<String> = recordings().into_iter().map(|r| r.build).collect();
    for l in layouts::ALL {
        let name = format!("3.{}{}", l.minor, if l.free_threaded { "t" } else { "" });
        // No interpreter of 3.14t / 3.15t exists here to record: their layouts come from the
        // headers and are walked only behind the self-check.
        let recordable = !(l.free_threaded && l.minor >= 14);
        assert_eq!(recorded.contains(&name), recordable, "{name}");
    }
}

#[test]
fn walks_of_recorded_stacks_give_what_python_said() {
    for r in recordings() {
        let b = &r.build;
        let free = b.ends_with('t');
        let minor: u8 = b.trim_end_matches('t')[2..].parse().unwrap();
        let runtime = r.symbols["_PyRuntime"];
        for tables in [true, false] {
            let (layout, source) = layouts::layout(&r.image, runtime, (3, minor), free, tables)
                .unwrap_or_else(|e| panic!("{b}: {e:?}"));
            // 3.13+ publish their layout: it agrees with the table; before, the table alone.
            let expected = if tables || minor < 13 {
                Source::Table
            } else {
                Source::Offsets
            };
            assert_eq!(source, expected, "{b} tables={tables}");
            assert_eq!(Some(&layout), layouts::for_build(minor, free), "{b}");
            let interp = Interpreter {
                layout: &layout,
                code_type: r.symbols["PyCode_Type"],
            };
            let mut out = [Frame::default(); 64];
            let w = walk(&r.image, &interp, r.tstate, &mut out);
            assert!(!w.failed && !w.truncated, "{b}: {w:?}");
            assert_eq!(w.depth, r.frames.len(), "{b}: frames walked");
            for (i, (f, truth)) in out[..w.depth].iter().zip(&r.frames).enumerate() {
                let facts = describe(&r.image, &layout, f.code, 4096);
                let got = (
                    facts.firstlineno,
                    text(&r.image, facts.qualname),
                    text(&r.image, facts.filename),
                );
                assert_eq!(got.0, truth.firstlineno, "{b} frame {i}");
                assert_eq!(got.1, truth.qualname, "{b} frame {i}");
                assert!(got.2.ends_with(&truth.file), "{b} frame {i}: {}", got.2);
                // The innermost frame went on running after Python described it.
                if i > 0 {
                    assert_eq!(f.lasti, truth.lasti, "{b} frame {i} ({})", truth.qualname);
                }
            }
            let types = Types {
                unicode: r.symbols["PyUnicode_Type"],
                bytes: r.symbols["PyBytes_Type"],
            };
            assert_eq!(
                self_check(&r.image, &interp, &types, r.tstate),
                Check::Passed(w.depth),
                "{b}"
            );
        }
    }
}

#[test]
fn a_layout_off_by_one_field_fails_the_self_check_on_a_recorded_stack() {
    for r in recordings() {
        let b = &r.build;
        let free = b.ends_with('t');
        let minor: u8 = b.trim_end_matches('t')[2..].parse().unwrap();
        let good = *layouts::for_build(minor, free).unwrap();
        let types = Types {
            unicode: r.symbols["PyUnicode_Type"],
            bytes: r.symbols["PyBytes_Type"],
        };
        let mut wrong = Vec::new();
        let mut l = good;
        l.code_filename += 8;
        wrong.push(("co_filename", l));
        let mut l = good;
        l.code_linetable -= 8;
        wrong.push(("co_linetable", l));
        let mut l = good;
        l.frame_back += 8;
        wrong.push(("previous", l));
        let mut l = good;
        l.code_firstlineno += 4;
        wrong.push(("co_firstlineno", l));
        for (what, l) in &wrong {
            let interp = Interpreter {
                layout: l,
                code_type: r.symbols["PyCode_Type"],
            };
            let verdict = self_check(&r.image, &interp, &types, r.tstate);
            assert!(
                matches!(verdict, Check::Failed(_) | Check::NotYet),
                "{b}: {what} moved, yet {verdict:?}"
            );
            assert_ne!(verdict, Check::Passed(r.frames.len()), "{b}: {what}");
        }
    }
}
