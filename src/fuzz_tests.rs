//! Fuzz tests of everything that reads untrusted bytes: channel files (random bytes, random
//! records behind a valid header, mutations of valid images, changes between two drains), the
//! decoder fed directly, code records with their line tables, and saved profiles (random and
//! mutated JSON). Each decoded channel also goes through the model and the JSON renderer.
//!
//! A fixed-seed xorshift PRNG makes every case reproducible (the failing seed is printed). A
//! panic aborts the test binary (`panic = "abort"`); an unbounded allocation aborts it too, and
//! a hang shows as a test that does not end: all are failures.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mlprof_wire::{Header, Kind, Record, Ring, DATA_BYTES, FRAMES_PER_RECORD, MAX_FRAMES};

use crate::collect::channels::Channels;
use crate::collect::decode::Decoder;
use crate::model::{self, Profile};
use crate::recording::Recording;
use crate::render;
use crate::symbolize::linetable::{LineIndex, LineTableFormat};
use crate::test_rng::Rng;

/// A fresh directory for one test.
fn dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mlprof-fuzz-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A record of a random kind (sometimes an unknown one) with hostile payload words.
fn random_record(rng: &mut Rng) -> Record {
    let mut r = Record::new(Kind::Sample, rng.below(5) as u32, 0);
    r.kind = rng.below(13) as u16;
    r.flags = rng.next() as u16;
    r.ts_ns = if rng.chance(4) {
        rng.word()
    } else {
        1_000 + rng.below(1_000_000_000)
    };
    (r.a, r.b, r.c, r.d, r.e) = (rng.word(), rng.word(), rng.word(), rng.word(), rng.word());
    r
}

/// A plausible event as the preload sends it (head + frames or data records), with some
/// fields made hostile, so that the decoder's deeper paths are reached.
fn event(rng: &mut Rng, out: &mut Vec<Record>) {
    let ts = 1_000 + rng.below(1_000_000_000);
    let tid = 1 + rng.below(4) as u32;
    let frames = |rng: &mut Rng, depth: u64, out: &mut Vec<Record>| {
        for _ in 0..depth.div_ceil(FRAMES_PER_RECORD as u64) {
            let mut f = Record::new(Kind::Frames, tid, ts);
            let mut w = || match rng.below(6) {
                0 => rng.word(),
                _ => rng.below(8) << 32 | rng.below(200),
            };
            (f.a, f.b, f.c, f.d, f.e) = (w(), w(), w(), w(), w());
            out.push(f);
        }
    };
    match rng.below(7) {
        0 => {
            let depth = rng.below(12);
            let mut r = Record::new(Kind::Sample, tid, ts);
            r.a = rng.word();
            r.b = if rng.chance(3) {
                rng.word()
            } else {
                10_000_000
            };
            r.c = depth | rng.below(16) << 32;
            r.d = rng.word();
            out.push(r);
            frames(rng, depth, out);
        }
        1 => {
            let depth = rng.below(8);
            let mut r = Record::new(Kind::Alloc, tid, ts);
            r.a = rng.below(16) << 12;
            r.b = rng.word();
            r.c = if rng.chance(3) { rng.word() } else { 1 << 20 };
            r.d = depth | rng.below(4) << 32;
            out.push(r);
            frames(rng, depth, out);
        }
        2 => {
            let depth = rng.below(8);
            let mut r = Record::new(Kind::Copy, tid, ts);
            (r.a, r.b, r.c) = (rng.word(), rng.word(), depth);
            out.push(r);
            frames(rng, depth, out);
        }
        3 => {
            let lens = [rng.below(40), rng.below(40), rng.below(120)];
            let mut r = Record::new(Kind::Code, tid, ts);
            r.a = rng.below(8);
            r.b = rng.word() & 0xffff_ffff | [1u64, 2, 4, 7][rng.below(4) as usize] << 32;
            r.b |= [1u64, 2, 4, 0][rng.below(4) as usize] << 40;
            r.c = lens[0] | lens[1] << 32;
            r.d = lens[2];
            r.e = rng.below(8) << 12;
            out.push(r);
            let total: u64 = lens.iter().sum();
            for _ in 0..total.div_ceil(DATA_BYTES as u64) {
                let mut d = Record::new(Kind::Data, tid, ts);
                (d.a, d.b, d.c, d.d, d.e) =
                    (rng.next(), rng.next(), rng.next(), rng.next(), rng.next());
                out.push(d);
            }
        }
        4 => {
            let mut r = Record::new(
                [
                    Kind::Free,
                    Kind::PeakMark,
                    Kind::ThreadStart,
                    Kind::ProcessExit,
                ][rng.below(4) as usize],
                tid,
                ts,
            );
            (r.a, r.b) = (rng.below(16) << 12, rng.word());
            out.push(r);
        }
        5 => {
            // A region's begin (with its name), a new high inside one, or its end, ids and
            // heaps mostly plausible: regions are cut out of the recording and modelled.
            let phase = rng.below(3);
            let name_len = if phase == 0 { rng.below(90) } else { 0 };
            let mut r = Record::new(Kind::Region, tid, ts);
            r.a = 1 + rng.below(6);
            r.b = phase | rng.below(3) << 8 | name_len << 32;
            r.c = if rng.chance(5) {
                rng.word()
            } else {
                rng.below(1 << 34)
            };
            r.d = if rng.chance(5) {
                rng.word()
            } else {
                rng.below(1 << 34)
            };
            out.push(r);
            for _ in 0..name_len.div_ceil(DATA_BYTES as u64) {
                let mut d = Record::new(Kind::Data, tid, ts);
                (d.a, d.b, d.c, d.d, d.e) =
                    (rng.next(), rng.next(), rng.next(), rng.next(), rng.next());
                out.push(d);
            }
        }
        _ => out.push(random_record(rng)),
    }
}

fn records(rng: &mut Rng, max: usize) -> Vec<Record> {
    let mut out = Vec::new();
    let n = rng.below(max as u64) as usize;
    while out.len() < n {
        if rng.chance(8) {
            out.push(random_record(rng));
        } else {
            event(rng, &mut out);
        }
    }
    out.truncate(n);
    out
}

/// A valid channel image of `slots` slots holding `records` (those that fit), with hostile
/// header fields when `wild` is set.
fn image(rng: &mut Rng, slots: u64, records: &[Record], wild: bool) -> Vec<u8> {
    let len = mlprof_wire::file_bytes(slots);
    let mut buf = vec![0u64; len.div_ceil(8) + 8];
    let base = buf.as_mut_ptr() as *mut u8;
    let aligned = base.wrapping_add(base.align_offset(64));
    let pid = 1 + rng.below(4) as u32;
    let version = rng.bytes(6);
    let cmdline_bytes = rng.below(64) as usize;
    let cmdline = rng.bytes(cmdline_bytes);
    let cmdline_len = if wild {
        rng.next() as u32
    } else {
        cmdline.len() as u32
    };
    let words: Vec<u64> = (0..8).map(|_| rng.word()).collect();
    // SAFETY: `aligned..aligned + len` is inside the zeroed, exclusively owned buffer.
    let ring = unsafe {
        Ring::init(aligned, len, slots, |h| {
            h.pid = pid;
            h.ppid = 1;
            h.start_ns = 500;
            h.python_version[..version.len()].copy_from_slice(&version);
            h.cmdline[..cmdline.len()].copy_from_slice(&cmdline);
            h.cmdline_len = cmdline_len;
            if wild {
                h.start_ns = words[0];
                h.inherited_heap = words[1];
                h.forked = words[2] as u32;
            }
        })
    }
    .unwrap();
    for r in records {
        let _ = ring.push(r);
    }
    let h = ring.header();
    h.sample_interval_ns.store(10_000_000, Ordering::Relaxed);
    if wild {
        h.heap.peak.store(words[3] as i64, Ordering::Relaxed);
        h.heap.current.store(words[4] as i64, Ordering::Relaxed);
        h.heap.total.store(words[5], Ordering::Relaxed);
        h.dropped.0.fetch_add(words[6], Ordering::Relaxed);
        h.state.store(rng.below(3) as u32, Ordering::Relaxed);
        h.exit_code.store(words[7] as i32, Ordering::Relaxed);
        h.exit_ns.store(rng.word(), Ordering::Relaxed);
        h.python_status
            .store(rng.below(7) as u32, Ordering::Relaxed);
        h.sample_interval_ns
            .store(rng.next() as u32, Ordering::Relaxed);
    }
    // SAFETY: the initialised bytes of the image.
    unsafe { std::slice::from_raw_parts(aligned, len) }.to_vec()
}

/// Overwrite `n` random spots of `image`: bytes, or whole aligned words with hostile values,
/// biased towards the header (where the counts and positions are).
fn mutate(rng: &mut Rng, image: &mut [u8], n: usize) {
    let header = std::mem::size_of::<Header>();
    for _ in 0..n {
        let span = if rng.chance(2) { header } else { image.len() };
        let at = rng.below(span as u64) as usize;
        if rng.chance(2) {
            image[at] = rng.next() as u8;
        } else {
            let at = at & !7;
            if at + 8 <= image.len() {
                image[at..at + 8].copy_from_slice(&rng.word().to_le_bytes());
            }
        }
    }
    // Sometimes the fields that matter most, by name.
    if rng.chance(3) {
        let fields = [
            std::mem::offset_of!(Header, slots),
            std::mem::offset_of!(Header, head),
            std::mem::offset_of!(Header, tail),
            std::mem::offset_of!(Header, dropped),
            std::mem::offset_of!(Header, cmdline_len),
            std::mem::offset_of!(Header, version),
        ];
        let at = fields[rng.below(fields.len() as u64) as usize];
        image[at..at + 8].copy_from_slice(&rng.word().to_le_bytes());
    }
}

/// Scan, drain, optionally let `between` change the files, drain and finish, in bounded time;
/// then the model and the JSON renderer on what was read.
fn collect(dir: &Path, between: impl FnOnce()) -> (Recording, Profile) {
    let started = Instant::now();
    let mut channels = Channels::new(dir, 0);
    channels.scan();
    channels.drain(10);
    between();
    channels.scan();
    channels.drain(20);
    let (mut summaries, warnings) = channels.finish(30);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "collection took {:?}",
        started.elapsed()
    );
    for s in &mut summaries {
        s.maps.clear(); // whatever process the header's pid names, its libraries are not ours
    }
    let rec = Recording {
        command: vec!["python3".into(), "fuzz.py".into()],
        wall_ns: 1_000_000_000,
        child_pid: summaries.first().map_or(1, |s| s.pid),
        channels: summaries,
        warnings,
        ..Recording::default()
    };
    let natives = crate::symbolize::native_names(&rec);
    let filter = model::Filter {
        all: true,
        ..model::Filter::default()
    };
    let profile = model::attribute(&rec, &natives, &filter);
    let text = render::json::render(&profile).unwrap();
    // What we write we must be able to read back (or refuse in one line), never crash on.
    if let Err(e) = render::json::parse(&text, "fuzz.json") {
        assert!(!e.to_string().contains('\n'));
    }
    (rec, profile)
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn clear(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let _ = std::fs::remove_file(entry.path());
    }
}

#[test]
fn channel_files_of_random_bytes() {
    let d = dir("bytes");
    let full = mlprof_wire::file_bytes(64);
    for seed in 0..300u64 {
        let mut rng = Rng::new(seed);
        let len = match rng.below(4) {
            0 => rng.below(64) as usize,
            1 => std::mem::size_of::<Header>() + rng.below(256) as usize,
            _ => rng.below(2 * full as u64) as usize,
        };
        let mut bytes = rng.bytes(len);
        if rng.chance(2) && len >= 16 {
            // A correct magic and version, so that the header checks after them are reached.
            bytes[..8].copy_from_slice(&mlprof_wire::MAGIC.to_le_bytes());
            bytes[8..12].copy_from_slice(&mlprof_wire::VERSION.to_le_bytes());
        }
        write(&d, &format!("{seed}.1.ring"), &bytes);
        let (rec, _) = collect(&d, || ());
        assert!(rec.channels.len() <= 1, "seed {seed}");
        clear(&d);
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn channels_of_random_records() {
    let d = dir("records");
    for seed in 0..400u64 {
        let mut rng = Rng::new(1000 + seed);
        let slots = [16u64, 64, 256][rng.below(3) as usize];
        let recs = records(&mut rng, 2 * slots as usize);
        let wild = rng.chance(2);
        let bytes = image(&mut rng, slots, &recs, wild);
        write(&d, &format!("{}.{seed}.ring", 1 + seed % 4), &bytes);
        if rng.chance(3) {
            let more = records(&mut rng, slots as usize);
            write(&d, "9.9.ring", &image(&mut rng, slots, &more, true));
        }
        let (rec, _) = collect(&d, || ());
        assert!(
            !rec.channels.is_empty(),
            "seed {seed}: a valid header is read"
        );
        for c in &rec.channels {
            for s in &c.samples {
                assert!(s.frames.len() <= MAX_FRAMES, "seed {seed}");
            }
        }
        clear(&d);
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn mutated_channel_images() {
    let d = dir("mutated");
    for seed in 0..600u64 {
        let mut rng = Rng::new(5000 + seed);
        let slots = [16u64, 64][rng.below(2) as usize];
        let recs = records(&mut rng, slots as usize);
        let mut bytes = image(&mut rng, slots, &recs, false);
        let n = 1 + rng.below(16) as usize;
        let early = rng.chance(2);
        if early {
            mutate(&mut rng, &mut bytes, n);
        }
        let path = write(&d, "3.3.ring", &bytes);
        let later = if early {
            None
        } else {
            let mut changed = bytes.clone();
            mutate(&mut rng, &mut changed, n);
            // Sometimes the program also truncates or grows its file between two drains.
            match rng.below(4) {
                0 => changed.truncate(rng.below(changed.len() as u64) as usize),
                1 => changed.extend(rng.bytes(100)),
                _ => {}
            }
            Some(changed)
        };
        // Rewriting in place (same inode, as the program would): a write may shrink it.
        collect(&d, || {
            if let Some(changed) = later {
                std::fs::write(&path, changed).unwrap();
            }
        });
        clear(&d);
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn decoder_fed_random_records_directly() {
    for seed in 0..1000u64 {
        let mut rng = Rng::new(90_000 + seed);
        let mut decoder = Decoder::default();
        let recs = records(&mut rng, 400);
        for r in &recs {
            decoder.feed(r, rng.word());
        }
        decoder.finish_pending();
        let out = &decoder.out;
        let frames: usize = out.samples.iter().map(|s| s.frames.len()).sum();
        assert!(frames <= recs.len() * FRAMES_PER_RECORD, "seed {seed}");
        for code in out.codes.values() {
            assert!(
                code.linetable.len() <= mlprof_wire::MAX_BLOB_BYTES,
                "seed {seed}"
            );
        }
    }
}

#[test]
fn code_records_with_random_line_tables() {
    let formats = [
        LineTableFormat::Lnotab39,
        LineTableFormat::Linetable310,
        LineTableFormat::Locations311,
    ];
    for seed in 0..1000u64 {
        let mut rng = Rng::new(123_000 + seed);
        let table_len = match rng.below(4) {
            0 => rng.below(4096),
            _ => rng.below(200),
        };
        let mut head = Record::new(Kind::Code, 1, 1);
        head.a = 1;
        head.b = rng.word() & 0xffff_ffff | 1 << 32 | 1 << 40;
        head.c = rng.below(30) | rng.below(30) << 32;
        head.d = table_len;
        let mut decoder = Decoder::default();
        decoder.feed(&head, 0);
        let total = (head.c & 0xffff_ffff) + (head.c >> 32) + table_len;
        // Sometimes fewer data records than declared (a truncated event).
        let sent = total.div_ceil(DATA_BYTES as u64) - rng.below(2).min(total / 40);
        for _ in 0..sent {
            let mut r = Record::new(Kind::Data, 1, 1);
            (r.a, r.b, r.c, r.d, r.e) =
                (rng.next(), rng.next(), rng.next(), rng.next(), rng.next());
            decoder.feed(&r, 0);
        }
        decoder.finish_pending();
        let Some(code) = decoder.out.codes.get(&1) else {
            continue;
        };
        for format in formats {
            let index = LineIndex::new(format, &code.linetable, code.firstlineno);
            for lasti in [-1, 0, 1, 1000, i32::MAX, i32::MIN, rng.next() as i32] {
                assert_eq!(
                    index.line(lasti),
                    crate::symbolize::linetable::line_for(
                        format,
                        &code.linetable,
                        code.firstlineno,
                        lasti
                    ),
                    "seed {seed}"
                );
            }
        }
    }
}

/// A profile with a little of everything, from a decoded channel, as JSON text.
fn sample_profile_json() -> String {
    let d = dir("json-source");
    let mut rng = Rng::new(77);
    let mut recs = Vec::new();
    while recs.len() < 60 {
        event(&mut rng, &mut recs);
    }
    write(&d, "1.1.ring", &image(&mut rng, 128, &recs, false));
    let (_, profile) = collect(&d, || ());
    let _ = std::fs::remove_dir_all(&d);
    render::json::render(&profile).unwrap()
}

/// Parse must refuse bad input in one line or accept it; what it accepts renders.
fn parse_any(text: &str, seed: u64) {
    match render::json::parse(text, "fuzz.json") {
        Ok(profile) => {
            let again = render::json::render(&profile).unwrap();
            assert!(
                render::json::parse(&again, "again.json").is_ok(),
                "seed {seed}"
            );
            let _ = render::text::render(&profile);
            for width in [40, 80] {
                let style = render::text::Style {
                    color: false,
                    width: Some(width),
                };
                let text = render::text::render_styled(&profile, style);
                assert!(
                    text.lines()
                        .all(|l| unicode_width::UnicodeWidthStr::width(l) <= width),
                    "seed {seed}: wider than {width}:\n{text}"
                );
            }
        }
        Err(e) => assert!(!e.to_string().contains('\n'), "seed {seed}: {e}"),
    }
}

#[test]
fn saved_profiles_random_and_mutated() {
    let valid = sample_profile_json();
    assert!(render::json::parse(&valid, "valid.json").is_ok());
    let numbers = [
        "0",
        "-1",
        "1e308",
        "-1e308",
        "18446744073709551615",
        "18446744073709551616",
        "9223372036854775807",
        "-9223372036854775808",
        "4294967295",
        "0.5",
        "1e-320",
        "\"x\"",
        "null",
        "[]",
        "{}",
        "true",
    ];
    for seed in 0..1500u64 {
        let mut rng = Rng::new(31_000 + seed);
        let text = match rng.below(5) {
            // Random bytes (as lossy UTF-8).
            0 => {
                let n = rng.below(300) as usize;
                String::from_utf8_lossy(&rng.bytes(n)).into_owned()
            }
            // Deep nesting.
            1 => {
                let depth = rng.below(20_000) as usize;
                format!("{}{}", "[".repeat(depth), "]".repeat(depth))
            }
            // Byte flips, deletions, duplications.
            2 => {
                let mut b = valid.clone().into_bytes();
                for _ in 0..1 + rng.below(8) {
                    let at = rng.below(b.len() as u64) as usize;
                    match rng.below(3) {
                        0 => b[at] = rng.next() as u8,
                        1 => {
                            let end = (at + rng.below(50) as usize).min(b.len());
                            b.drain(at..end);
                        }
                        _ => {
                            let end = (at + rng.below(50) as usize).min(b.len());
                            let piece = b[at..end].to_vec();
                            b.splice(at..at, piece);
                        }
                    }
                    if b.is_empty() {
                        break;
                    }
                }
                String::from_utf8_lossy(&b).into_owned()
            }
            // Token-level: a value replaced by an extreme one (still valid JSON, mostly).
            _ => {
                let mut t = valid.clone();
                for _ in 0..1 + rng.below(4) {
                    let digits: Vec<usize> = t
                        .match_indices(": ")
                        .map(|(i, _)| i + 2)
                        .filter(|&i| t.as_bytes()[i].is_ascii_digit())
                        .collect();
                    if digits.is_empty() {
                        break;
                    }
                    let at = digits[rng.below(digits.len() as u64) as usize];
                    let end = t[at..]
                        .find(|c: char| !(c.is_ascii_digit() || ".e-+".contains(c)))
                        .map_or(t.len(), |n| at + n);
                    let with = numbers[rng.below(numbers.len() as u64) as usize];
                    t.replace_range(at..end, with);
                }
                t
            }
        };
        parse_any(&text, seed);
    }
}
